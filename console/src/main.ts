// The console's pages, one hash route each (#/jobs, #/jobs/<id>, #/submit, #/credits). Everything a job
// controls is set as text (dom.ts); the API is docs/http-api.md's, same origin.

import "./style.css";
import { ApiError, call, FINAL, type Job, query, signIn, signOut, token } from "./api";
import { h, replace } from "./dom";
import { childCounts, logText, optionalNumber, resultText, timeline } from "./format";
import { finishSignIn, loadSignInConfig, type SignInConfig, startSignIn } from "./signin";

const main = document.getElementById("main") as HTMLElement;
const nav = document.getElementById("nav") as HTMLElement;
let stopPolling: (() => void) | null = null;
let signInConfig: SignInConfig = { signIn: "token" };
let signInFailure: unknown = null;

function errorText(error: unknown): string {
  if (error instanceof ApiError) return `${error.code}: ${error.message}`;
  return error instanceof Error ? error.message : String(error);
}

function showError(where: Element, error: unknown): void {
  where.appendChild(h("p", { class: "error", role: "alert" }, errorText(error)));
}

function page(title: string, ...children: (Node | string | null)[]): void {
  document.title = `${title} · remote-batch`;
  replace(main, h("h1", {}, title), ...children);
}

function renderNav(): void {
  if (!token()) {
    replace(nav);
    return;
  }
  replace(
    nav,
    h("a", { href: "#/jobs" }, "Jobs"),
    h("a", { href: "#/submit" }, "Submit"),
    h("a", { href: "#/credits" }, "Credits"),
    h("a", { href: "#/signin", onclick: () => signOut() }, "Sign out"),
  );
}

// -- sign in ---------------------------------------------------------------------------------------------
function signInPage(): void {
  if (signInConfig.signIn === "cognito") {
    const button = h(
      "button",
      { type: "button", onclick: () => void startSignIn(signInConfig, (url) => window.location.assign(url)) },
      "Sign in",
    );
    page("Sign in", h("p", {}, "Sign in with your remote-batch account."), h("p", {}, button));
    if (signInFailure) showError(main, signInFailure);
    return;
  }
  const tokenField = h("input", { id: "token", type: "password", autocomplete: "off", required: true });
  const accountField = h("input", { id: "account", type: "text", autocomplete: "off" });
  const form = h(
    "form",
    {
      onsubmit: (event: Event) => {
        event.preventDefault();
        signIn(tokenField.value, accountField.value);
        window.location.hash = "#/jobs";
      },
    },
    h("label", { for: "token" }, "Token"),
    tokenField,
    h("label", { for: "account" }, "Account (optional: another account you are a member of)"),
    accountField,
    h("p", {}, h("button", { type: "submit" }, "Sign in")),
  );
  page("Sign in", h("p", {}, "Locally, the dev token that make dev prints works."), form);
}

// -- jobs ------------------------------------------------------------------------------------------------
async function jobsPage(params: URLSearchParams): Promise<void> {
  const status = params.get("status") ?? "";
  const nextToken = params.get("nextToken");
  const statusSelect = h("select", { id: "status-filter" });
  for (const value of ["", "Queued", "Starting", "Running", "Succeeded", "Terminated"]) {
    const option = h("option", { value }, value || "Any");
    if (value === status) option.selected = true;
    statusSelect.appendChild(option);
  }
  const filters = h(
    "form",
    {
      onsubmit: (event: Event) => {
        event.preventDefault();
        window.location.hash = `#/jobs${query({ status: statusSelect.value })}`;
      },
    },
    h("label", { for: "status-filter" }, "Status"),
    statusSelect,
    h("button", { type: "submit" }, "Filter"),
  );
  const body = h("tbody");
  const table = h(
    "table",
    {},
    h("caption", {}, "Jobs, newest first"),
    h(
      "thead",
      {},
      h("tr", {}, h("th", { scope: "col" }, "Select"), h("th", { scope: "col" }, "Job"), h("th", { scope: "col" }, "Name"),
        h("th", { scope: "col" }, "Status"), h("th", { scope: "col" }, "Machine class"), h("th", { scope: "col" }, "Submitted")),
    ),
    body,
  );
  const messages = h("div");
  const abortSelected = h("button", { type: "button" }, "Abort selected");
  const pager = h("p");
  page("Jobs", filters, h("p", {}, abortSelected), table, pager, messages);
  try {
    const answer = await call<{ jobs: Job[]; nextToken: string | null }>(
      "GET",
      `/jobs${query({ status, nextToken, limit: 25 })}`,
    );
    for (const job of answer.jobs) {
      const box = h("input", { type: "checkbox", value: job.jobId, "aria-label": `Select ${job.jobId}` });
      body.appendChild(
        h("tr", {},
          h("td", {}, FINAL.has(job.status) ? null : box),
          h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(job.jobId)}` }, job.jobId)),
          h("td", {}, job.name ?? ""),
          h("td", { class: `status-${job.status}` }, job.status),
          h("td", {}, job.machineClass),
          h("td", {}, job.submittedAt)),
      );
    }
    if (answer.jobs.length === 0) body.appendChild(h("tr", {}, h("td", { colspan: 6 }, "No jobs on this page.")));
    if (nextToken) pager.appendChild(h("a", { href: `#/jobs${query({ status })}` }, "First page"));
    if (answer.nextToken) {
      pager.appendChild(document.createTextNode(" "));
      pager.appendChild(h("a", { href: `#/jobs${query({ status, nextToken: answer.nextToken })}` }, "Next page"));
    }
  } catch (error) {
    showError(messages, error);
  }
  abortSelected.addEventListener("click", async () => {
    const chosen = [...body.querySelectorAll<HTMLInputElement>("input[type=checkbox]:checked")].map((box) => box.value);
    for (const jobId of chosen) {
      try {
        await call("POST", `/jobs/${encodeURIComponent(jobId)}/abort`);
      } catch (error) {
        showError(messages, error);
      }
    }
    if (chosen.length) void route();
  });
}

// -- one job ---------------------------------------------------------------------------------------------
async function jobPage(jobId: string): Promise<void> {
  const path = `/jobs/${encodeURIComponent(jobId)}`;
  const statusSection = h("section", { "aria-labelledby": "status-h" });
  const logPre = h("pre", { id: "log", role: "log", tabindex: 0, "aria-label": "Log text" });
  const withTimes = h("input", { type: "checkbox", id: "log-times" });
  const resultSection = h("div");
  const outputsSection = h("div");
  const messages = h("div");
  const abort = h("button", { type: "button" }, "Abort");
  const remove = h("button", { type: "button" }, "Delete");
  page(
    "Job",
    h("p", {}, h("span", { id: "job-id" }, jobId)),
    h("p", {}, abort, remove),
    messages,
    h("h2", { id: "status-h" }, "Status"),
    statusSection,
    h("section", { "aria-labelledby": "log-h" }, h("h2", { id: "log-h" }, "Log"),
      h("p", {}, withTimes, h("label", { for: "log-times", class: "inline" }, "Show timestamps")), logPre),
    h("section", { "aria-labelledby": "result-h" }, h("h2", { id: "result-h" }, "Result"), resultSection),
    h("section", { "aria-labelledby": "outputs-h" }, h("h2", { id: "outputs-h" }, "Outputs"), outputsSection),
  );
  let events: { timestamp: string; message: string }[] = [];
  withTimes.addEventListener("change", () => {
    logPre.textContent = logText(events, withTimes.checked);
  });
  abort.addEventListener("click", async () => {
    try {
      await call("POST", `${path}/abort`);
      await refresh();
    } catch (error) {
      showError(messages, error);
    }
  });
  remove.addEventListener("click", async () => {
    try {
      await call("DELETE", path);
      messages.appendChild(h("p", { role: "status" }, "Deleted the job's inputs, outputs and log."));
    } catch (error) {
      showError(messages, error);
    }
  });

  async function refresh(): Promise<boolean> {
    const job = await call<Job>("GET", path);
    const steps = h("ol", { "aria-label": "Timeline" });
    for (const step of timeline(job)) steps.appendChild(h("li", {}, `${step.step}: ${step.at ?? "not yet"}`));
    const facts: [string, string][] = [
      ["Status", job.status],
      ["Reason", job.statusReason ?? ""],
      ["Name", job.name ?? ""],
      ["Machine class", job.machineClass],
      ["Geo zone", job.geoZone],
      ["Credits spent", String(job.creditsSpent)],
      ["Children", childCounts(job.childStatusCounts)],
      ["Waiting for", (job.waitingFor ?? []).join(", ")],
    ];
    const list = h("dl");
    for (const [term, value] of facts) {
      if (!value) continue;
      list.appendChild(h("dt", {}, term));
      list.appendChild(h("dd", { class: term === "Status" ? `status-${value}` : undefined }, value));
    }
    replace(statusSection, list, steps);
    abort.hidden = FINAL.has(job.status);
    remove.hidden = !FINAL.has(job.status);
    if (job.type !== "Array" && job.status !== "Queued") {
      const log = await call<{ events: { timestamp: string; message: string }[] }>("GET", `${path}/log`);
      events = log.events;
      logPre.textContent = logText(events, withTimes.checked);
    }
    if (FINAL.has(job.status)) {
      try {
        const result = await call<{ result: unknown; resultRepr: string | null; messages: string[] }>("GET", `${path}/result`);
        replace(resultSection, h("pre", { id: "result" }, resultText(result)),
          ...result.messages.map((message) => h("p", {}, message)));
      } catch (error) {
        replace(resultSection, h("p", {}, errorText(error)));
      }
      try {
        const outputs = await call<{ files: { name: string; size: number; url: string }[] }>("GET", `${path}/outputs`);
        const items = h("ul");
        for (const file of outputs.files) {
          items.appendChild(h("li", {}, h("a", { href: file.url, download: file.name }, file.name), ` (${file.size} bytes)`));
        }
        replace(outputsSection, outputs.files.length ? items : h("p", {}, "No outputs."));
      } catch (error) {
        replace(outputsSection, h("p", {}, errorText(error)));
      }
    }
    return FINAL.has(job.status);
  }

  try {
    if (!(await refresh())) {
      const timer = window.setInterval(async () => {
        try {
          if (await refresh()) window.clearInterval(timer);
        } catch (error) {
          window.clearInterval(timer);
          showError(messages, error);
        }
      }, 1000);
      stopPolling = () => window.clearInterval(timer);
    }
  } catch (error) {
    showError(messages, error);
  }
}

// -- submit ----------------------------------------------------------------------------------------------
async function submitPage(): Promise<void> {
  const code = h("textarea", { id: "code", required: true, spellcheck: "false" });
  const machineClass = h("select", { id: "machine-class" });
  const geoZone = h("select", { id: "geo-zone" });
  for (const zone of ["Automatic", "UnitedStates", "EuropeanUnion"]) geoZone.appendChild(h("option", { value: zone }, zone));
  const credits = h("input", { id: "credit-constraint", type: "text", inputmode: "decimal" });
  const seconds = h("input", { id: "time-constraint", type: "text", inputmode: "numeric" });
  const estimate = h("p", { id: "estimate", role: "status" });
  const messages = h("div");
  const form = h(
    "form",
    {},
    h("label", { for: "code" }, "Code"),
    code,
    h("label", { for: "machine-class" }, "Machine class"),
    machineClass,
    h("label", { for: "geo-zone" }, "Geo zone"),
    geoZone,
    h("label", { for: "credit-constraint" }, "Credit constraint"),
    credits,
    h("label", { for: "time-constraint" }, "Time constraint"),
    seconds,
    estimate,
    h("p", {}, h("button", { type: "button", id: "estimate-button" }, "Estimate"), h("button", { type: "submit" }, "Submit")),
  );
  page("Submit", form, messages);
  try {
    const classes = await call<{ machineClasses: { name: string; creditsPerHour: number | string }[] }>("GET", "/machine-classes");
    for (const one of classes.machineClasses) {
      machineClass.appendChild(h("option", { value: one.name }, `${one.name} (${one.creditsPerHour} credits/hour)`));
    }
  } catch (error) {
    showError(messages, error);
  }
  function body(): Record<string, unknown> {
    return {
      code: code.value,
      machineClass: machineClass.value,
      geoZone: geoZone.value,
      creditConstraint: optionalNumber(credits.value, "Credit constraint"),
      timeConstraint: optionalNumber(seconds.value, "Time constraint"),
    };
  }
  async function price(): Promise<boolean> {
    try {
      const chosen = body();
      const runSeconds = (chosen.timeConstraint as number | null) ?? 60;
      const answer = await call<{ credits: string | number; billedSeconds: number }>("POST", "/estimate", { ...chosen, seconds: runSeconds });
      estimate.textContent = `Estimate: ${answer.credits} credits for ${answer.billedSeconds} s billed.`;
      return true;
    } catch (error) {
      estimate.textContent = "";
      showError(messages, error);
      return false;
    }
  }
  (form.querySelector("#estimate-button") as HTMLButtonElement).addEventListener("click", () => void price());
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!(await price())) return;
    try {
      const job = await call<Job>("POST", "/jobs", body());
      window.location.hash = `#/jobs/${encodeURIComponent(job.jobId)}`;
    } catch (error) {
      showError(messages, error);
    }
  });
}

// -- credits ---------------------------------------------------------------------------------------------
interface UsageEntry {
  at: string;
  kind: string;
  credits: string | number;
  jobId: string | null;
  balanceAfter: string | number;
  note: string | null;
}

async function creditsPage(params: URLSearchParams): Promise<void> {
  const nextToken = params.get("nextToken");
  const balance = h("p", { id: "balance" });
  const rows = h("tbody");
  const pager = h("p");
  const messages = h("div");
  page(
    "Credits",
    balance,
    h("table", {}, h("caption", {}, "Ledger, newest first"),
      h("thead", {}, h("tr", {}, ...["At", "Kind", "Credits", "Job", "Balance after", "Note"].map((name) => h("th", { scope: "col" }, name)))),
      rows),
    pager,
    messages,
  );
  try {
    const accountView = await call<{ creditBalance: string | number }>("GET", "/account");
    balance.textContent = `Balance: ${accountView.creditBalance} credits`;
    const usage = await call<{ entries: UsageEntry[]; nextToken: string | null }>("GET", `/account/usage${query({ nextToken, limit: 50 })}`);
    for (const entry of usage.entries) {
      rows.appendChild(h("tr", {}, h("td", {}, entry.at), h("td", {}, entry.kind), h("td", {}, String(entry.credits)),
        h("td", {}, entry.jobId ? h("a", { href: `#/jobs/${encodeURIComponent(entry.jobId)}` }, entry.jobId) : ""),
        h("td", {}, String(entry.balanceAfter)), h("td", {}, entry.note ?? "")));
    }
    if (usage.nextToken) pager.appendChild(h("a", { href: `#/credits${query({ nextToken: usage.nextToken })}` }, "Next page"));
  } catch (error) {
    showError(messages, error);
  }
}

// -- routing ---------------------------------------------------------------------------------------------
async function route(): Promise<void> {
  stopPolling?.();
  stopPolling = null;
  renderNav();
  const [path = "", search = ""] = window.location.hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(search);
  if (!token() || path === "/signin") return signInPage();
  if (path.startsWith("/jobs/")) return jobPage(decodeURIComponent(path.slice("/jobs/".length)));
  if (path === "/submit") return submitPage();
  if (path === "/credits") return creditsPage(params);
  return jobsPage(params);
}

// In the cloud the managed login comes back to /console/?code=...&state=...: exchanged once, then the query
// leaves the address bar (a reload must not replay a spent code).
async function start(): Promise<void> {
  try {
    signInConfig = await loadSignInConfig();
    if (signInConfig.signIn === "cognito" && window.location.search) {
      const idToken = await finishSignIn(signInConfig, window.location.search);
      if (idToken) signIn(idToken, "");
      window.history.replaceState(null, "", `${window.location.pathname}#/jobs`);
    }
  } catch (error) {
    signInFailure = error;
    window.history.replaceState(null, "", `${window.location.pathname}#/signin`);
  }
  window.addEventListener("hashchange", () => void route());
  await route();
}

void start();
