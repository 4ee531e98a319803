// Where the console signs in. `config.json` beside the console says it (infra/console_upload.py writes it
// when deployed); where there is none (the local stack) the console takes a token typed in.
//
// In the cloud: Cognito's managed login, OAuth 2.0 authorization code grant with PKCE (RFC 7636, S256),
// for the console's public app client (no secret). The verifier and state live in sessionStorage only
// until the code comes back; the ID token is then the bearer token, in sessionStorage as a typed one is.

export interface SignInConfig {
  signIn: "token" | "cognito";
  authority?: string;
  clientId?: string;
  redirectUri?: string;
  scopes?: string[];
}

const VERIFIER_KEY = "remote-batch.pkce-verifier";
const STATE_KEY = "remote-batch.pkce-state";

/** `config.json` beside the console; `{signIn: "token"}` when there is none or it is not one. */
export async function loadSignInConfig(fetcher: typeof fetch = fetch): Promise<SignInConfig> {
  try {
    const response = await fetcher("config.json", { cache: "no-cache" });
    if (!response.ok) return { signIn: "token" };
    const config = (await response.json()) as SignInConfig;
    if (config.signIn !== "cognito") return { signIn: "token" };
    for (const key of ["authority", "clientId", "redirectUri"] as const) {
      if (typeof config[key] !== "string" || !config[key]) throw new Error(`config.json has no ${key}`);
    }
    return config;
  } catch (error) {
    if (error instanceof Error && error.message.startsWith("config.json")) throw error;
    return { signIn: "token" };
  }
}

/** base64url without padding (RFC 4648 section 5), as PKCE's verifier and challenge are written. */
export function base64url(bytes: Uint8Array): string {
  let text = "";
  for (const byte of bytes) text += String.fromCharCode(byte);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** A new code verifier: 32 random bytes, 43 characters (RFC 7636 section 4.1). */
export function newVerifier(): string {
  const bytes = new Uint8Array(32);
  crypto.getRandomValues(bytes);
  return base64url(bytes);
}

/** The S256 code challenge of `verifier`: base64url(SHA-256(verifier)) (RFC 7636 section 4.2). */
export async function codeChallenge(verifier: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  return base64url(new Uint8Array(digest));
}

/** The managed login's authorize URL for `verifier` and `state` (Cognito's /oauth2/authorize). */
export async function authorizeUrl(config: SignInConfig, verifier: string, state: string): Promise<string> {
  const url = new URL("/oauth2/authorize", config.authority);
  url.searchParams.set("response_type", "code");
  url.searchParams.set("client_id", config.clientId ?? "");
  url.searchParams.set("redirect_uri", config.redirectUri ?? "");
  url.searchParams.set("scope", (config.scopes ?? ["openid"]).join(" "));
  url.searchParams.set("state", state);
  url.searchParams.set("code_challenge_method", "S256");
  url.searchParams.set("code_challenge", await codeChallenge(verifier));
  return url.toString();
}

/** Start a sign-in: keep a new verifier and state for the return, then go to the managed login. */
export async function startSignIn(config: SignInConfig, go: (url: string) => void): Promise<void> {
  const verifier = newVerifier();
  const state = newVerifier();
  sessionStorage.setItem(VERIFIER_KEY, verifier);
  sessionStorage.setItem(STATE_KEY, state);
  go(await authorizeUrl(config, verifier, state));
}

/**
 * Finish a sign-in from the page's query (`?code=...&state=...`): the code for the ID token at Cognito's
 * /oauth2/token. Returns the ID token, or null when the query holds no code. Throws on a state that is
 * not the one this tab sent (a forged or stale return), an `error` from the login, or a refused exchange.
 */
export async function finishSignIn(
  config: SignInConfig,
  search: string,
  fetcher: typeof fetch = fetch,
): Promise<string | null> {
  const params = new URLSearchParams(search);
  const failure = params.get("error");
  if (failure) throw new Error(`Sign-in failed: ${failure}`);
  const code = params.get("code");
  if (!code) return null;
  const expected = sessionStorage.getItem(STATE_KEY);
  const verifier = sessionStorage.getItem(VERIFIER_KEY);
  sessionStorage.removeItem(STATE_KEY);
  sessionStorage.removeItem(VERIFIER_KEY);
  if (!expected || !verifier || params.get("state") !== expected) {
    throw new Error("Sign-in failed: the answer is not for this tab's request; sign in again.");
  }
  const response = await fetcher(new URL("/oauth2/token", config.authority).toString(), {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      client_id: config.clientId ?? "",
      code,
      redirect_uri: config.redirectUri ?? "",
      code_verifier: verifier,
    }).toString(),
  });
  if (!response.ok) throw new Error(`Sign-in failed: the token endpoint answered ${response.status}`);
  const tokens = (await response.json()) as { id_token?: string };
  if (!tokens.id_token) throw new Error("Sign-in failed: no ID token in the answer");
  return tokens.id_token;
}
