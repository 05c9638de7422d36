// PUBLIC_URL (src/protocol/http/public-url.ts): the origin links are made with.
import { describe, expect, it } from "vitest";
import { publicOrigin } from "../../src/protocol/http/public-url.js";

const request = new URL("http://127.0.0.1:8791/v1/runs/r/share?ttl=1h");

describe("publicOrigin", () => {
  it("falls back to the request's origin when unset or blank", () => {
    for (const v of [undefined, "", "   "]) expect(publicOrigin(v, request)).toBe("http://127.0.0.1:8791");
  });

  it("takes an http(s) origin, with or without its trailing slash, as its origin", () => {
    expect(publicOrigin("https://relay.example.com", request)).toBe("https://relay.example.com");
    expect(publicOrigin("https://relay.example.com/", request)).toBe("https://relay.example.com");
    expect(publicOrigin("http://tunnel.example.net:8443", request)).toBe("http://tunnel.example.net:8443");
    expect(publicOrigin("HTTPS://Relay.Example.com", request)).toBe("https://relay.example.com");
  });

  it("refuses anything else, naming PUBLIC_URL", () => {
    for (const v of [
      "relay.example.com",
      "ftp://relay.example.com",
      "https://relay.example.com/relay",
      "https://relay.example.com/?a=1",
      "https://relay.example.com/#x",
      "https://user:pw@relay.example.com",
    ]) {
      expect(() => publicOrigin(v, request), v).toThrow(/^PUBLIC_URL ".*" is not an http\(s\) origin/);
    }
  });
});
