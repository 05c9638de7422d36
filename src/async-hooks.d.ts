// workerd's AsyncLocalStorage (compatibility flag `nodejs_als`), the one member of node:async_hooks
// the relay uses (src/objects/billing/metered.ts); the Worker's tsconfig has no Node types.
declare module "node:async_hooks" {
  export class AsyncLocalStorage<T> {
    getStore(): T | undefined;
    run<R>(store: T, fn: () => R): R;
  }
}
