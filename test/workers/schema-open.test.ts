// An object's schema opens in its constructor (src/objects/storage/schema.ts). SQLite out of memory
// there (a local runtime's SQLite heap, shared by every object of the process, full: the search
// bench meets it with ~1,600 episodes open) is the runtime's trouble, not the storage's: the object
// is not marked failed for good; a request answers `overloaded` (503) until the open succeeds, then
// the object works as if nothing happened. The out-of-memory is injected into a real object's
// SQLite: its first `exec` calls throw what workerd throws, the rest run.

import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { checkSchema, SchemaState } from "../../src/objects/storage/schema.js";
import { RelayError } from "../../src/protocol/http/errors.js";

const SCHEMA = checkSchema({
  object: "Probe",
  migrations: [{ version: 1, what: "a table", up: (sql) => void sql.exec("CREATE TABLE probe_things (x)") }],
});

/** The object's storage, whose SQLite runs out of memory for its first `failures` statements. */
function shortOfMemory(storage: DurableObjectStorage, failures: number): DurableObjectStorage {
  let left = failures;
  const sql = new Proxy(storage.sql, {
    get(target, key) {
      if (key !== "exec") return Reflect.get(target, key);
      return (query: string, ...args: unknown[]) => {
        if (left-- > 0) throw new Error("out of memory: SQLITE_NOMEM");
        return target.exec(query, ...(args as []));
      };
    },
  });
  return new Proxy(storage, {
    get(target, key) {
      if (key === "sql") return sql;
      const v = Reflect.get(target, key);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

/** An object's storage with its own tables dropped (the gate's constructor made them): empty, for SCHEMA. */
function emptied(storage: DurableObjectStorage): DurableObjectStorage {
  for (const t of ["leases", "waiters", "schema_version"]) storage.sql.exec(`DROP TABLE IF EXISTS ${t}`);
  return storage;
}

describe("a schema open that ran out of memory", () => {
  it("is not remembered as a failure: a request answers overloaded until it opens, then it works", async () => {
    await runInDurableObject(env.ARCHIVE_GATE.getByName(`schema-open-${Date.now()}`), (_i, state) => {
      const storage = shortOfMemory(emptied(state.storage), 2);
      const schema = new SchemaState(storage, SCHEMA);
      schema.open(true); // the constructor: out of memory
      expect(schema.isOpen).toBe(false);
      expect(schema.failed, "not a storage failure").toBeNull();
      let refusal: unknown;
      try {
        schema.check(); // the first request: out of memory again
      } catch (e) {
        refusal = e;
      }
      expect(refusal).toBeInstanceOf(RelayError);
      expect((refusal as RelayError).code).toBe("overloaded");
      expect((refusal as RelayError).status).toBe(503);
      expect(() => schema.check(), "the next request opens it").not.toThrow();
      expect(schema.isOpen).toBe(true);
      const tables = state.storage.sql
        .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE name = 'probe_things'")
        .toArray();
      expect(tables).toHaveLength(1);
    });
  });

  it("a real storage failure is still remembered: storage_upgrade_failed", async () => {
    await runInDurableObject(env.ARCHIVE_GATE.getByName(`schema-fail-${Date.now()}`), (_i, state) => {
      emptied(state.storage).sql.exec("CREATE TABLE probe_things (x)"); // what migration 1 creates: it fails
      const schema = new SchemaState(state.storage, {
        ...SCHEMA,
        migrations: [{ version: 1, what: "a table", up: (sql) => void sql.exec("CREATE TABLE probe_things (x)") }],
      });
      const log = console.error;
      console.error = () => {};
      try {
        schema.open(true);
      } finally {
        console.error = log;
      }
      expect(schema.failed).toContain("could not go from schema version 0");
      expect(() => schema.check()).toThrow(/storage upgrade failed/);
    });
  });
});
