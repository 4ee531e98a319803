import { describe, expect, it } from "vitest";
import { h, isSafeUrl } from "../src/dom";
import { childCounts, logText, optionalNumber, resultText } from "../src/format";

const XSS = "<img src=x onerror=alert(1)>";

describe("dom", () => {
  it("sets job-controlled text as text, never as markup", () => {
    const cell = h("td", {}, XSS);
    expect(cell.textContent).toBe(XSS);
    expect(cell.querySelector("img")).toBeNull();
    expect(cell.innerHTML).toBe("&lt;img src=x onerror=alert(1)&gt;");
  });

  it("refuses javascript: links", () => {
    expect(isSafeUrl("javascript:alert(1)")).toBe(false);
    expect(isSafeUrl("#/jobs/job-1")).toBe(true);
    expect(isSafeUrl("https://bucket.s3.us-east-1.amazonaws.com/a?X-Amz-Signature=1")).toBe(true);
    expect(() => h("a", { href: "javascript:alert(1)" }, "x")).toThrow(/Refusing a link/);
  });
});

describe("format", () => {
  it("shows a result's JSON value, else its repr", () => {
    expect(resultText({ result: 42, resultRepr: "42" })).toBe("42");
    expect(resultText({ result: null, resultRepr: "<int with 5001 digits>" })).toBe("<int with 5001 digits>");
    expect(resultText({ result: null, resultRepr: null })).toBe("null");
  });

  it("counts an array's children that have a count", () => {
    expect(childCounts({ Succeeded: 3, Running: 1, Queued: 0 })).toBe("Succeeded: 3, Running: 1");
    expect(childCounts(null)).toBe("");
  });

  it("joins log lines with timestamps on demand", () => {
    const events = [
      { timestamp: "2026-12-02T12:00:00.000Z", message: "one" },
      { timestamp: "2026-12-02T12:00:01.000Z", message: "two" },
    ];
    expect(logText(events, false)).toBe("one\ntwo");
    expect(logText(events, true)).toBe("2026-12-02T12:00:00.000Z one\n2026-12-02T12:00:01.000Z two");
  });

  it("reads an optional positive number", () => {
    expect(optionalNumber(" ", "Time constraint")).toBeNull();
    expect(optionalNumber("600", "Time constraint")).toBe(600);
    expect(() => optionalNumber("-1", "Credit constraint")).toThrow("Credit constraint must be a positive number or empty.");
    expect(() => optionalNumber("abc", "Credit constraint")).toThrow(/positive number/);
  });
});
