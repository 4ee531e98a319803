// Pure formatting of API values for the pages (unit-tested in test/format.test.ts).

import type { Job } from "./api";

/** The status timeline of a job: each step with its time, or null while not reached. */
export function timeline(job: Job): { step: string; at: string | null }[] {
  return [
    { step: "Submitted", at: job.submittedAt },
    { step: "Started", at: job.startedAt },
    { step: "Completed", at: job.completedAt },
  ];
}

/** A result for people: its JSON value, else its repr (docs/http-api.md, The result). */
export function resultText(result: { result: unknown; resultRepr?: string | null }): string {
  if (result.result === null && result.resultRepr) return result.resultRepr;
  return JSON.stringify(result.result, null, 2);
}

/** An array's children counts as `Succeeded: 3, Running: 1` (statuses with a count only), or "". */
export function childCounts(counts: Record<string, number> | null): string {
  if (!counts) return "";
  return Object.entries(counts)
    .filter(([, count]) => count > 0)
    .map(([status, count]) => `${status}: ${count}`)
    .join(", ");
}

/** Log events as text, each line prefixed with its timestamp when `withTimes`. */
export function logText(events: { timestamp: string; message: string }[], withTimes: boolean): string {
  return events.map((event) => (withTimes ? `${event.timestamp} ${event.message}` : event.message)).join("\n");
}

/** A numeric form field: null when empty, else the number (NaN refused with a message). */
export function optionalNumber(value: string, field: string): number | null {
  const trimmed = value.trim();
  if (!trimmed) return null;
  const parsed = Number(trimmed);
  if (!Number.isFinite(parsed) || parsed <= 0) throw new Error(`${field} must be a positive number or empty.`);
  return parsed;
}
