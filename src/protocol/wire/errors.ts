/** A frame that is not valid (canonical) msgpack; `offset` is where the reader stopped. */
export class WireError extends Error {
  readonly offset: number;
  constructor(message: string, offset: number) {
    super(`${message} (at byte ${offset})`);
    this.name = "WireError";
    this.offset = offset;
  }
}
