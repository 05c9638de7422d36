// Which of the relay's reward numbers a view shows. Pure (no DOM): the Node tests check them.
//
// - The runs list shows one mean reward per run: the key named `reward` when the run has it (a
//   bare number is read as `reward`, src/protocol/registry/rewards.ts), else its first key by name.
// - The run page's statistics count the finished episodes only (`finished_rewards`, the default:
//   a failed or refused episode's scores are not what the trainer learns from) or every episode
//   (`rewards`, with the failed, finish-refused and live ones' scores so far).

export function primaryRewardKey(means: Readonly<Record<string, number>> | null | undefined): string | null {
  if (!means) return null;
  if ("reward" in means) return "reward";
  return Object.keys(means).sort()[0] ?? null;
}

/** The statistics to show: every episode's, or the finished ones'. */
export function shownRewards<T>(
  a: { rewards: Record<string, T>; finished_rewards: Record<string, T> },
  includeAll: boolean,
): Record<string, T> {
  return includeAll ? a.rewards : a.finished_rewards;
}
