// Which of the relay's reward numbers a view shows. Pure (no DOM): the Node tests check them.
//
// - The runs list shows one mean reward per run: the key named `reward` when the run has it (a
//   bare number is read as `reward`, src/protocol/registry/rewards.ts), else its first key by name;
//   the run page's key selects (tasks, the reward filter) list and default to the keys in that order.
// - The run page's statistics count the finished episodes only (`finished_rewards`, the default:
//   a failed or refused episode's scores are not what the trainer learns from) or every episode
//   (`rewards`, with the failed, finish-refused and live ones' scores so far).

export function primaryRewardKey(means: Readonly<Record<string, number>> | null | undefined): string | null {
  return means ? (rewardKeyOrder(Object.keys(means))[0] ?? null) : null;
}

/** A run's reward keys as every list and select shows them: the trainer's `reward` first, then by name. */
export function rewardKeyOrder(keys: Iterable<string>): string[] {
  const all = [...new Set(keys)].sort();
  return [...all.filter((k) => k === "reward"), ...all.filter((k) => k !== "reward")];
}

/**
 * A reward key's colour slot on one page (the tk-N tones of rewards.css), the same in every chart: `reward` the
 * first; each other key the next slot when the page first meets it (by name among those met together), kept for the
 * page's life, so a key met later never recolours the ones drawn.
 */
export class KeyTones {
  private readonly tones = new Map<string, number>([["reward", 0]]);

  /** Give the keys not met yet their slots. */
  meet(keys: Iterable<string>): void {
    for (const k of rewardKeyOrder(keys)) if (!this.tones.has(k)) this.tones.set(k, this.tones.size);
  }

  tone(key: string): number {
    this.meet([key]);
    return this.tones.get(key)!;
  }
}

/** The statistics to show: every episode's, or the finished ones'. */
export function shownRewards<T>(
  a: { rewards: Record<string, T>; finished_rewards: Record<string, T> },
  includeAll: boolean,
): Record<string, T> {
  return includeAll ? a.rewards : a.finished_rewards;
}
