// The HTTP API of docs/http-api.md, same origin. The token lives in sessionStorage only: it is gone when
// the tab closes, and no other storage (localStorage, cookies) ever holds it.

const TOKEN_KEY = "remote-batch.token";
const ACCOUNT_KEY = "remote-batch.account";

export interface ApiErrorBody {
  error: { code: string; message: string; field: string | null };
}

/** A non-2xx answer: `status`, and the API's error `code` and `message` (docs/http-api.md, Errors). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** The account requests act in (`X-Account-Id`); null: the caller's own. */
export function account(): string | null {
  return sessionStorage.getItem(ACCOUNT_KEY);
}

export function signIn(newToken: string, accountId: string): void {
  sessionStorage.setItem(TOKEN_KEY, newToken.trim());
  if (accountId.trim()) sessionStorage.setItem(ACCOUNT_KEY, accountId.trim());
  else sessionStorage.removeItem(ACCOUNT_KEY);
}

export function signOut(): void {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(ACCOUNT_KEY);
}

/** Call the API: JSON in and out; the error body becomes an ApiError. 204 gives null. */
export async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Accept: "application/json" };
  const bearer = token();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  const acting = account();
  if (acting) headers["X-Account-Id"] = acting;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 204) return null as T;
  const text = await response.text();
  if (!response.ok) {
    let parsed: ApiErrorBody | null = null;
    try {
      parsed = JSON.parse(text) as ApiErrorBody;
    } catch {
      parsed = null;
    }
    const error = parsed?.error;
    throw new ApiError(response.status, error?.code ?? "HttpError", error?.message ?? `HTTP ${response.status}`);
  }
  return JSON.parse(text) as T;
}

/** A query string of the set values, keys in the given order. */
export function query(params: Record<string, string | number | null | undefined>): string {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") search.set(key, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

export interface Job {
  jobId: string;
  name: string | null;
  type: string;
  status: string;
  statusReason: string | null;
  machineClass: string;
  geoZone: string;
  creditConstraint: string | number | null;
  timeConstraint: number | null;
  creditsSpent: string | number;
  submittedAt: string;
  startedAt: string | null;
  completedAt: string | null;
  childStatusCounts: Record<string, number> | null;
  waitingFor?: string[];
  dependsOn?: { jobId: string; condition: string }[];
  pythonVersion?: string | null;
}

export const FINAL = new Set(["Succeeded", "Terminated"]);
