// Metering a Durable Object class without editing its methods (src/worker/index.ts exports
// `metered(EpisodeObject)` and so on under the names wrangler.toml binds):
//
//  - The subclass's constructor puts a view of `ctx.storage` on the real ctx before `super` (an
//    own `storage` property: workerd's DurableObject constructor type-checks ctx). Its `sql.exec`
//    hands each cursor to the meter (rows), `setAlarm` counts a row written; every other member is
//    the real one, bound to the real storage (transactionSync, deleteAll...). acceptWebSocket,
//    getWebSockets, blockConcurrencyWhile stay untouched on ctx.
//  - Every method of the class's prototype chain (up to DurableObject) is wrapped on the
//    subclass's prototype. A call that arrives from outside (the runtime's fetch, alarm,
//    webSocket*, an RPC) counts as one event (a request; webSocketMessage/Close a wsIn) for its
//    interval; the object's own calls run inside that event (an AsyncLocalStorage holds the
//    instance whose event is running) and count nothing. No Proxy: `this` is the instance itself,
//    inside and out, and stack traces show the methods. `usage()` itself counts nothing.
//  - `instanceof` holds for both the exported class and the original; RPC sees every method.
//
// For the archive code (R2 operations are counted where they happen):
//   usageOf(this)?.r2Put(bytes)    // in an object's method
//   usageOf(storage)?.r2Get()      // or with the ctx, or with `ctx.storage` as the object holds it
// It answers undefined for an unmetered object (a unit test constructing the class itself).

import { DurableObject } from "cloudflare:workers";
import { AsyncLocalStorage } from "node:async_hooks";
import { type EventKind, meterFor, type Usage, type UsageMeter, writtenTable } from "../../protocol/billing/usage.js";

/** The instance, its ctx and its storage view → its meter. */
const METERS = new WeakMap<object, UsageMeter>();
/** The instance whose counted event is running (its own calls then count nothing). */
const EVENT = new AsyncLocalStorage<object>();

/** The meter of a metered object (its instance, its ctx or `ctx.storage`). */
export function usageOf(x: object): UsageMeter | undefined {
  return METERS.get(x);
}

/** What `usage()` adds to every metered object. */
interface Metered {
  /** This object's usage (reading it counts as nothing). */
  usage(): Usage;
}

interface MeterOptions<T> {
  /** Names of other objects whose usage belongs with this one's (answered as `peers`). */
  peers?: (o: T) => string[];
}

const NOT_METHODS = new Set(["constructor", "usage"]);

/** How a handler counts: socket messages (and closes) are inbound WebSocket messages, not requests. */
function kindOf(name: string): EventKind {
  if (name === "webSocketMessage" || name === "webSocketClose") return "wsIn";
  if (name === "webSocketError") return "none";
  return "request";
}

/** `Base` with its billing units counted (see above). */
export function metered<T extends DurableObject<Env>>(
  Base: new (ctx: DurableObjectState, env: Env) => T,
  options: MeterOptions<T> = {},
): new (
  ctx: DurableObjectState,
  env: Env,
) => T & Metered {
  const object = Base.name;
  const Parent = Base as unknown as new (...args: unknown[]) => DurableObject<Env>;
  class MeteredObject extends Parent {
    constructor(...args: unknown[]) {
      const [ctx, env] = args as [DurableObjectState, Env];
      const meter = instrument(ctx, object);
      super(ctx, env);
      METERS.set(this, meter);
    }

    usage(): Usage {
      const u = METERS.get(this)!.snapshot(Date.now(), this.ctx.storage.sql.databaseSize);
      // (what it reads of the object is the object's own call: not a request)
      const peers = EVENT.run(this, () => options.peers?.(this as unknown as T));
      return peers ? { ...u, peers } : u;
    }
  }
  Object.defineProperty(MeteredObject, "name", { value: object });
  // the wrappers sit on the prototype: the runtime (and vitest-pool-workers) look methods up there
  for (
    let p: object | null = Base.prototype;
    p && p !== DurableObject.prototype && p !== Object.prototype;
    p = Object.getPrototypeOf(p)
  ) {
    for (const name of Object.getOwnPropertyNames(p)) {
      const d = Object.getOwnPropertyDescriptor(p, name);
      if (NOT_METHODS.has(name) || Object.hasOwn(MeteredObject.prototype, name) || typeof d?.value !== "function")
        continue;
      Object.defineProperty(MeteredObject.prototype, name, {
        ...d,
        value: counting(name, d.value as (...args: unknown[]) => unknown),
      });
    }
  }
  return MeteredObject as unknown as new (
    ctx: DurableObjectState,
    env: Env,
  ) => T & Metered;
}

/** Method `name`: a call from outside the object's own event counts as one event, until its promise settles. */
function counting(name: string, fn: (...args: unknown[]) => unknown): (...args: unknown[]) => unknown {
  const kind = kindOf(name);
  // (a computed key names the function: stack traces show the method)
  return {
    [name](this: object, ...args: unknown[]): unknown {
      const m = METERS.get(this);
      if (m === undefined || EVENT.getStore() === this) return fn.apply(this, args); // the object's own call
      return EVENT.run(this, () => {
        m.begin(Date.now(), kind);
        let out: unknown;
        try {
          out = fn.apply(this, args);
        } catch (e) {
          m.end(Date.now());
          throw e;
        }
        if (out instanceof Promise) {
          return out.then(
            (v) => {
              m.end(Date.now());
              return v;
            },
            (e: unknown) => {
              m.end(Date.now());
              throw e;
            },
          );
        }
        m.end(Date.now());
        return out;
      });
    },
  }[name]!;
}

/** Put the metered storage view on `ctx` (before the object's constructor sees it). */
function instrument(ctx: DurableObjectState, object: string): UsageMeter {
  const known = METERS.get(ctx);
  if (known) {
    known.wake(Date.now()); // the same ctx constructed again
    return known;
  }
  const meter = meterFor(object, ctx.id.toString(), Date.now());
  const storage = ctx.storage;
  const sql = storage.sql;
  const exec = (query: string, ...bindings: unknown[]) => {
    const cursor = sql.exec(query, ...bindings);
    meter.cursor(cursor, writtenTable(query));
    meter.touch(Date.now());
    return cursor;
  };
  const setAlarm = (...args: Parameters<DurableObjectStorage["setAlarm"]>) => {
    meter.rows(0, 1, "alarm"); // billed as one row written
    return storage.setAlarm(...args);
  };
  const sqlView = new Proxy(sql, { get: (t, p) => (p === "exec" ? exec : boundMember(t, p)) });
  const storageView = new Proxy(storage, {
    get: (t, p) => (p === "sql" ? sqlView : p === "setAlarm" ? setAlarm : boundMember(t, p)),
  });
  Object.defineProperty(ctx, "storage", { value: storageView, configurable: true, enumerable: true });
  METERS.set(ctx, meter);
  METERS.set(storageView, meter);
  return meter;
}

const bound = new WeakMap<object, Map<PropertyKey, unknown>>();

/** `target[prop]`, functions bound to `target` (the runtime's methods need their own `this`). */
function boundMember(target: object, prop: PropertyKey): unknown {
  const v = Reflect.get(target, prop, target) as unknown;
  if (typeof v !== "function") return v;
  let cache = bound.get(target);
  if (!cache) bound.set(target, (cache = new Map()));
  let f = cache.get(prop);
  if (f === undefined) cache.set(prop, (f = (v as (...a: unknown[]) => unknown).bind(target)));
  return f;
}
