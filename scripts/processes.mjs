// The process table, for the local relay's supervision (scripts/relay.mjs: which runtime is a
// tier's, whether its parent is gone) and the process tests (what is left after a stop or a kill).
// Linux reads /proc; elsewhere `ps` (POSIX).
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

/**
 * @typedef {{ pid: number, ppid: number, pgid: number, state: string, comm: string, start: number }} Proc
 *   `start`: when it started (clock ticks since boot on Linux, 0 elsewhere): with the pid, which process it is
 */

/** Every process: pid → its parent, group, state (Z: a zombie, already dead) and command name. */
export function processTable() {
  /** @type {Map<number, Proc>} */
  const table = new Map();
  if (process.platform === "linux") {
    for (const name of readdirSync("/proc")) {
      if (!/^\d+$/.test(name)) continue;
      let stat;
      try {
        stat = readFileSync(`/proc/${name}/stat`, "utf8");
      } catch {
        continue; // it exited meanwhile
      }
      // pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses
      const close = stat.lastIndexOf(")");
      const f = stat.slice(close + 2).split(" ");
      const comm = stat.slice(stat.indexOf("(") + 1, close);
      table.set(Number(name), {
        pid: Number(name),
        ppid: Number(f[1]),
        pgid: Number(f[2]),
        state: f[0] ?? "",
        comm,
        start: Number(f[19]),
      });
    }
    return table;
  }
  const out = execFileSync("ps", ["-A", "-o", "pid=,ppid=,pgid=,stat=,comm="], { encoding: "utf8" });
  for (const line of out.split("\n")) {
    const m = /^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(.*)$/.exec(line);
    if (!m) continue;
    const comm = (m[5] ?? "").split("/").pop() ?? "";
    table.set(Number(m[1]), {
      pid: Number(m[1]),
      ppid: Number(m[2]),
      pgid: Number(m[3]),
      state: m[4]?.[0] ?? "",
      comm,
      start: 0,
    });
  }
  return table;
}

/**
 * The live (not zombie) descendants of `root`, children first.
 * @param {number} root
 * @param {Map<number, Proc>} [table]
 * @returns {Proc[]}
 */
export function descendants(root, table = processTable()) {
  /** @type {Map<number, Proc[]>} */
  const children = new Map();
  for (const p of table.values()) children.set(p.ppid, [...(children.get(p.ppid) ?? []), p]);
  /** @type {Proc[]} */
  const out = [];
  const queue = [root];
  while (queue.length) {
    for (const c of children.get(/** @type {number} */ (queue.shift())) ?? []) {
      if (c.state !== "Z") out.push(c);
      queue.push(c.pid);
    }
  }
  return out;
}

/** Whether `pid` runs (a zombie does not). @param {number} pid */
export function alive(pid) {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  const p = processTable().get(pid);
  return p !== undefined && p.state !== "Z";
}

/** This process's parent as of now (Node's `process.ppid` is the one at start). */
export function currentParent() {
  if (process.platform === "linux") {
    try {
      const stat = readFileSync("/proc/self/stat", "utf8");
      return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    } catch {
      // fall through
    }
  }
  return alive(process.ppid) ? process.ppid : 1;
}
