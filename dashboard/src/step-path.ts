// A per-minute series as an SVG step line: each value a level across its minute's column, joined to
// the next minute's; a minute without a value (null) leaves a gap, so a quiet minute does not read
// as 0, and a lone minute still shows as a short level. Pure (no DOM).

/** The path (M/L commands) of `values` over `width` user units; `y` maps a value to its height. */
export function stepPath(values: ReadonlyArray<number | null>, width: number, y: (v: number) => number): string {
  const n = values.length;
  const parts: string[] = [];
  values.forEach((v, i) => {
    if (v === null) return;
    const [x0, x1, h] = [((i / n) * width).toFixed(1), (((i + 1) / n) * width).toFixed(1), y(v).toFixed(1)];
    parts.push(`${i > 0 && values[i - 1] !== null ? "L" : "M"}${x0},${h} L${x1},${h}`);
  });
  return parts.join(" ");
}
