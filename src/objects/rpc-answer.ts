// An RPC call's answer, with what the runtime keeps for it let go at once. An answer that is an
// object keeps its call's pipeline (and any stub in it) until it is disposed; in a Durable Object,
// whose context lasts as long as the object, that means until the collector finds it (workerd
// then warns "An RPC result was not disposed properly"), after every call: the episode feeds
// each of its hubs after every commit. Plain data in the answer stays readable once disposed.

export async function rpcAnswer<T>(call: Promise<T>): Promise<T> {
  const answer = await call;
  (answer as Partial<Disposable> | null | undefined)?.[Symbol.dispose]?.();
  return answer;
}
