// The colour of an expert id, shared by the routing heatmap and its colour key so the two agree.

export function expertColour(id: number): [number, number, number] {
  // golden-angle hues: neighbouring ids get distant colours
  const hue = (id * 137.508) % 360;
  return hsl(hue, 0.62, 0.52 + ((id >> 3) % 3) * 0.08);
}

function hsl(h: number, s: number, l: number): [number, number, number] {
  const k = (n: number) => (n + h / 30) % 12;
  const a = s * Math.min(l, 1 - l);
  const f = (n: number) => l - a * Math.max(-1, Math.min(k(n) - 3, Math.min(9 - k(n), 1)));
  return [Math.round(f(0) * 255), Math.round(f(8) * 255), Math.round(f(4) * 255)];
}
