// The page's frame: the header (brand, breadcrumbs, the connection pill, the token form) and the
// main area the list and the episode page draw into.

import { getToken, setToken } from "./api.js";
import { clear, h } from "./dom.js";
import { homeHref } from "./links.js";

export type ConnState =
  | "connecting"
  | "live"
  | "resuming"
  | "finished"
  | "failed"
  | "offline"
  | "closed"
  | "catching_up"
  | "refused"
  | "waiting"
  | "unauthorized"
  | "forbidden";

/**
 * Words for the connection to the relay (the header's pill). They never reuse an episode status
 * word ("live", "finished", "failed"), so the pill cannot be read as the run's status badge.
 */
const LABELS: Record<ConnState, string> = {
  connecting: "connecting",
  catching_up: "syncing",
  live: "connected",
  resuming: "reconnecting",
  // the page holds everything there is: said plainly (a grey "stream ended" read as broken)
  finished: "complete",
  failed: "complete",
  offline: "offline",
  closed: "disconnected",
  refused: "refused",
  waiting: "waiting for the run",
  unauthorized: "token needed",
  forbidden: "no access",
};

/** What the pill says when hovered, unless the page says more. */
const TITLES: Partial<Record<ConnState, string>> = {
  waiting: "the relay has no such run yet: the page looks again now and then",
  finished: "everything is shown: the run ended, nothing more will come",
  failed: "everything is shown: the run ended, nothing more will come",
};

/**
 * The pill's state for a refused request: the relay answered, so it is not "offline" (401: no or a bad token; 403: the
 * token does not cover it).
 */
export function refusal(status: number | undefined): ConnState {
  return status === 401 ? "unauthorized" : status === 403 ? "forbidden" : "offline";
}

export interface Shell {
  main: HTMLElement;
  setConnection(state: ConnState, detail?: string): void;
  setTitle(parts: Array<string | Node>): void;
  /** Show the token form with a reason (401/403). */
  askToken(reason: string): void;
}

export function shell(root: HTMLElement, onToken: () => void): Shell {
  const conn = h(
    "span.conn",
    {
      id: "connection",
      "data-state": "connecting",
      role: "status",
      "aria-live": "polite",
      "aria-label": "connection to the relay",
    },
    h("span.dot"),
    h("span.conn-prefix", null, "relay"),
    h("span.conn-label", null, LABELS.connecting),
  );
  const crumbs = h("nav.crumbs", { "aria-label": "breadcrumb" });
  const tokenInput = h("input.token-input", {
    type: "password",
    placeholder: "paste a bearer token",
    autocomplete: "off",
    spellcheck: "false",
    "aria-label": "bearer token",
  });
  const tokenReason = h("p.token-reason");
  const tokenPanel = h(
    "form.token-panel",
    { id: "token-panel", hidden: true },
    tokenReason,
    h(
      "div.token-row",
      null,
      tokenInput,
      h("button.btn.primary", { type: "submit" }, "Use token"),
      h("button.btn", { type: "button", id: "token-clear" }, "Clear"),
    ),
    h(
      "p.hint",
      null,
      "Kept in this tab's session storage only. Make one with ",
      h("code", null, "npm run token -- --role watcher --episode '*'"),
      ".",
    ),
  );
  tokenPanel.addEventListener("submit", (e) => {
    e.preventDefault();
    setToken(tokenInput.value);
    tokenInput.value = "";
    tokenPanel.hidden = true;
    refreshTokenButton();
    onToken();
  });
  tokenPanel.querySelector("#token-clear")!.addEventListener("click", () => {
    setToken(null);
    tokenInput.value = "";
    refreshTokenButton();
    onToken();
  });
  const tokenButton = h("button.btn.ghost", { type: "button", id: "token-button", "aria-controls": "token-panel" });
  const refreshTokenButton = () => {
    tokenButton.textContent = getToken() ? "Token ✓" : "Token";
    tokenButton.title = getToken() ? "a token is set for this tab" : "set a bearer token";
  };
  refreshTokenButton();
  tokenButton.addEventListener("click", () => {
    tokenPanel.hidden = !tokenPanel.hidden;
    if (!tokenPanel.hidden) tokenInput.focus();
  });
  const header = h(
    "header.topbar",
    null,
    h(
      "div.topbar-inner",
      null,
      h("a.brand", { href: homeHref() }, h("span.logo", { "aria-hidden": "true" }), "Episode Relay"),
      crumbs,
      h("div.spacer"),
      conn,
      tokenButton,
    ),
    tokenPanel,
  );
  const main = h("main.content");
  clear(root);
  root.append(header, main);
  return {
    main,
    setConnection(state, detail) {
      conn.dataset.state = state;
      conn.querySelector(".conn-label")!.textContent = LABELS[state];
      conn.title = detail ?? TITLES[state] ?? "";
    },
    setTitle(parts) {
      clear(crumbs);
      for (const p of parts)
        crumbs.append(
          h("span.crumb-sep", { "aria-hidden": "true" }, "/"),
          typeof p === "string" ? h("span.crumb", null, p) : p,
        );
    },
    askToken(reason) {
      tokenReason.textContent = reason;
      tokenPanel.hidden = false;
      tokenInput.focus();
    },
  };
}
