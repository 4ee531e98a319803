import { beforeEach, describe, expect, it } from "vitest";
import { authorizeUrl, codeChallenge, finishSignIn, loadSignInConfig, type SignInConfig, startSignIn } from "../src/signin";

const CONFIG: SignInConfig = {
  signIn: "cognito",
  authority: "https://remote-batch-dev-1.auth.us-east-1.amazoncognito.com",
  clientId: "client123",
  redirectUri: "https://d111.cloudfront.net/console/",
  scopes: ["openid", "email", "profile"],
};

function answer(status: number, body: unknown): typeof fetch {
  return (async () => new Response(JSON.stringify(body), { status })) as unknown as typeof fetch;
}

beforeEach(() => sessionStorage.clear());

describe("sign-in config", () => {
  it("is a typed token where there is no config.json (the local stack)", async () => {
    expect(await loadSignInConfig(answer(404, {}))).toEqual({ signIn: "token" });
    expect(await loadSignInConfig(answer(200, { signIn: "token" }))).toEqual({ signIn: "token" });
  });

  it("is Cognito's managed login when config.json says so, and names a missing field", async () => {
    expect(await loadSignInConfig(answer(200, CONFIG))).toEqual(CONFIG);
    await expect(loadSignInConfig(answer(200, { ...CONFIG, clientId: "" }))).rejects.toThrow("config.json has no clientId");
  });
});

describe("PKCE", () => {
  it("computes the S256 challenge: base64url of the verifier's SHA-256, no padding", async () => {
    const verifier = "dBjftJeZ4CVP-mJ0uMyIh1PCg7tE7OMMDn2GWrAHK74";
    // Computed apart: base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=") in Python.
    expect(await codeChallenge(verifier)).toBe("b3iAa4qZQMkxGjQU5LdnqGPDQumE0EB_eX_0K-K0NZs");
  });

  it("asks the managed login for a code with the challenge, never for tokens directly", async () => {
    const url = new URL(await authorizeUrl(CONFIG, "dBjftJeZ4CVP-mJ0uMyIh1PCg7tE7OMMDn2GWrAHK74", "s1"));
    expect(url.origin + url.pathname).toBe(`${CONFIG.authority}/oauth2/authorize`);
    expect(Object.fromEntries(url.searchParams)).toEqual({
      response_type: "code",
      client_id: "client123",
      redirect_uri: CONFIG.redirectUri,
      scope: "openid email profile",
      state: "s1",
      code_challenge_method: "S256",
      code_challenge: "b3iAa4qZQMkxGjQU5LdnqGPDQumE0EB_eX_0K-K0NZs",
    });
  });

  it("exchanges the returned code with the tab's own verifier for the ID token", async () => {
    let went = "";
    await startSignIn(CONFIG, (url) => (went = url));
    const state = new URL(went).searchParams.get("state") ?? "";
    let sent: URLSearchParams | null = null;
    const token = (async (_url: unknown, init?: RequestInit) => {
      sent = new URLSearchParams(String(init?.body));
      return new Response(JSON.stringify({ id_token: "id.jwt.token", access_token: "a" }), { status: 200 });
    }) as unknown as typeof fetch;

    expect(await finishSignIn(CONFIG, `?code=c1&state=${state}`, token)).toBe("id.jwt.token");
    const form = sent as unknown as URLSearchParams;
    expect(form.get("grant_type")).toBe("authorization_code");
    expect(form.get("code")).toBe("c1");
    expect(await codeChallenge(form.get("code_verifier") ?? "")).toBe(new URL(went).searchParams.get("code_challenge"));
    // The verifier is spent: the same answer again is refused.
    await expect(finishSignIn(CONFIG, `?code=c1&state=${state}`, token)).rejects.toThrow("not for this tab's request");
  });

  it("refuses an answer whose state this tab did not send, and an error from the login", async () => {
    await startSignIn(CONFIG, () => undefined);
    await expect(finishSignIn(CONFIG, "?code=c1&state=forged", answer(200, { id_token: "x" }))).rejects.toThrow(
      "not for this tab's request",
    );
    await expect(finishSignIn(CONFIG, "?error=access_denied", answer(200, {}))).rejects.toThrow("access_denied");
    expect(await finishSignIn(CONFIG, "", answer(200, {}))).toBeNull();
  });
});
