// Percentiles and the markdown table the benchmark prints.

export function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

export function summary(values) {
  const sorted = Float64Array.from(values).sort();
  const mean = sorted.reduce((a, b) => a + b, 0) / (sorted.length || 1);
  return { n: sorted.length, mean, p50: percentile(sorted, 50), p99: percentile(sorted, 99), max: sorted.at(-1) ?? NaN };
}

export const ms = (v) => `${v.toFixed(2)} ms`;
export const us = (v) => `${(v * 1000).toFixed(0)} µs`;
export const rate = (v) => Math.round(v).toLocaleString('en-US');

/** A markdown table: `rows` are arrays of cells, the first row the header. */
export function table(rows) {
  const [head, ...body] = rows;
  const align = head.map((_, i) => (i === 0 ? '---' : '---:'));
  return [head, align, ...body].map((r) => `| ${r.join(' | ')} |`).join('\n');
}
