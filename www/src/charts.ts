// The training charts (uPlot): loss by step, and GPU memory stacked by category through each
// step's phases (memory.timeline), with the device's limits drawn as lines.

import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import type { MemoryReport } from './types.ts';
import { bytes, ibytes } from './ui.ts';

/** Bottom to top in the stack. */
export const CATEGORIES = ['weights', 'lora', 'grads', 'optimizer', 'checkpoints', 'activations', 'scratch', 'staging'] as const;
const COLORS: Record<string, string> = {
  weights: '#8aa4c8',
  lora: '#2f8f7a',
  grads: '#e0a33a',
  optimizer: '#c8664f',
  checkpoints: '#7f6db3',
  activations: '#5aa4d6',
  scratch: '#a9b36b',
  staging: '#b7b0a6',
};

/** Whole steps on the x axes. */
const STEP_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000];

function css(name: string, fallback: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
}

function axis(extra: Partial<uPlot.Axis> = {}): uPlot.Axis {
  const ink = css('--muted', '#667');
  const grid = css('--line', '#e5e7eb');
  return { stroke: ink, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 }, font: '12px system-ui, sans-serif', ...extra };
}

/** Keep a chart as wide as its box. */
function fit(u: uPlot, box: HTMLElement, height: number): void {
  const ro = new ResizeObserver(() => {
    const w = Math.max(200, Math.floor(box.clientWidth));
    if (w !== u.width) u.setSize({ width: w, height });
  });
  ro.observe(box);
}

export class LossChart {
  private u: uPlot;
  private steps: number[] = [];
  private losses: number[] = [];
  private smooth: number[] = [];

  constructor(private box: HTMLElement, private empty: HTMLElement) {
    const height = 220;
    const accent = css('--accent', '#2f6f62');
    this.u = new uPlot(
      {
        width: Math.max(200, box.clientWidth),
        height,
        legend: { show: true },
        cursor: { drag: { x: false, y: false } },
        scales: { x: { time: false } },
        axes: [axis({ label: 'step', labelSize: 18, labelFont: '12px system-ui, sans-serif', incrs: STEP_INCRS }), axis({ size: 48 })],
        series: [
          { label: 'step', value: (_u, v) => (v == null ? '' : String(v)) },
          { label: 'loss', stroke: css('--muted-2', '#9aa3ad'), width: 1, points: { show: true, size: 4 }, value: (_u, v) => (v == null ? '' : v.toFixed(4)) },
          { label: 'smoothed', stroke: accent, width: 2.5, points: { show: false }, value: (_u, v) => (v == null ? '' : v.toFixed(4)) },
        ],
      },
      [[], [], []],
      box,
    );
    fit(this.u, box, height);
  }

  /** Replace the whole curve (a resumed run). */
  set(losses: number[]): void {
    this.steps = losses.map((_, i) => i + 1);
    this.losses = [...losses];
    this.smooth = [];
    let ema = NaN;
    for (const l of this.losses) this.smooth.push((ema = Number.isNaN(ema) ? l : 0.8 * ema + 0.2 * l));
    this.draw();
  }

  add(step: number, loss: number): void {
    this.steps.push(step);
    this.losses.push(loss);
    const prev = this.smooth[this.smooth.length - 1];
    this.smooth.push(prev === undefined ? loss : 0.8 * prev + 0.2 * loss);
    this.draw();
  }

  private draw(): void {
    this.u.setData([this.steps, this.losses, this.smooth]);
    // Read by tests/page/run.mjs.
    this.box.dataset.points = String(this.steps.length);
    this.box.dataset.first = String(this.losses[0] ?? '');
    this.box.dataset.last = String(this.losses[this.losses.length - 1] ?? '');
    this.empty.hidden = this.steps.length > 0;
  }
}

/**
 * A step's seconds by kind of phase, as `webtune bench` prints them: the time between two samples
 * of the timeline belongs to the later one's phase (its first word; lm_head's phases whole).
 */
export function secondsByPhase(tl: { phase: string; t_ms: number }[]): string {
  const sums = new Map<string, number>();
  for (let i = 1; i < tl.length; i++) {
    const p = tl[i].phase;
    const kind = p.startsWith('lm_head') ? p : p.split(' ')[0];
    sums.set(kind, (sums.get(kind) ?? 0) + (tl[i].t_ms - tl[i - 1].t_ms) / 1000);
  }
  return [...sums].map(([k, s]) => `${k} ${s.toFixed(s < 10 ? 2 : 1)} s`).join(', ');
}

export class MemoryChart {
  private u: uPlot;
  private xs: number[] = [];
  private phases: string[] = [];
  /** Seconds into its step of each point (NaN where the engine gave no timeline). */
  private times: number[] = [];
  private own: Record<string, number[]> = Object.fromEntries(CATEGORIES.map((c) => [c, []]));
  private limits = { buffer: 0, binding: 0 };
  private toScale = false;
  private peak = 0;

  constructor(private box: HTMLElement, private note: HTMLElement, private empty: HTMLElement) {
    const height = 240;
    const ink = css('--ink', '#1f2933');
    const series: uPlot.Series[] = [{ label: 'phase', value: (_u, v, _si, i) => (v == null || i == null ? '' : `step ${Math.ceil(v)}, ${this.phases[i] ?? ''}${Number.isFinite(this.times[i]) ? ` at ${this.times[i].toFixed(2)} s` : ''}`) }];
    // Drawn top of the stack first: series k holds the sum of categories up to k from the bottom.
    for (const c of [...CATEGORIES].reverse()) {
      series.push({
        label: c,
        stroke: COLORS[c],
        fill: COLORS[c],
        width: 1,
        points: { show: false },
        paths: uPlot.paths.stepped?.({ align: -1 }),
        value: (_u, _v, _si, i) => (i == null ? '' : bytes(this.own[c][i] ?? 0)),
      });
    }
    this.u = new uPlot(
      {
        width: Math.max(200, box.clientWidth),
        height,
        legend: { show: true },
        cursor: { drag: { x: false, y: false }, points: { show: false } },
        scales: {
          x: { time: false },
          y: { range: (_u, _min, max) => [0, this.yMax(max)] },
        },
        axes: [axis({ label: 'step', labelSize: 18, labelFont: '12px system-ui, sans-serif', incrs: STEP_INCRS }), axis({ size: 64, values: (_u, v) => v.map((x) => bytes(x)) })],
        series,
        hooks: { draw: [(u) => this.drawLimits(u, ink)] },
      },
      [[], ...CATEGORIES.map(() => [])],
      box,
    );
    fit(this.u, box, height);
  }

  /** The device limits as dashed lines; limits far above the data share one line pinned at
   *  the top (the y range leaves room for it), labelled "off the scale". */
  private drawLimits(u: uPlot, ink: string): void {
    const ctx = u.ctx;
    const dpr = devicePixelRatio || 1;
    const byValue = new Map<number, string[]>();
    if (this.limits.buffer) byValue.set(this.limits.buffer, ['buffer']);
    if (this.limits.binding) byValue.set(this.limits.binding, [...(byValue.get(this.limits.binding) ?? []), 'binding']);
    const off: string[] = [];
    ctx.save();
    ctx.font = `${11 * dpr}px system-ui, sans-serif`;
    ctx.textAlign = 'left';
    ctx.textBaseline = 'alphabetic';
    ctx.fillStyle = ink;
    ctx.strokeStyle = ink;
    ctx.lineWidth = 1.25 * dpr;
    ctx.setLineDash([5 * dpr, 4 * dpr]);
    const line = (y: number, label: string) => {
      ctx.beginPath();
      ctx.moveTo(u.bbox.left, y);
      ctx.lineTo(u.bbox.left + u.bbox.width, y);
      ctx.stroke();
      ctx.fillText(label, u.bbox.left + 6 * dpr, y + 14 * dpr);
    };
    for (const [v, names] of byValue) {
      const y = u.valToPos(v, 'y', true);
      if (y < u.bbox.top) off.push(`${names.join(' & ')} ${ibytes(v)}`);
      else line(y, `max ${names.join(' & ')} ${ibytes(v)}`);
    }
    if (off.length) line(u.bbox.top + 1, `↑ device limits, off the scale: max ${off.join(', ')}`);
    ctx.restore();
  }

  private yMax(dataMax: number): number {
    const top = Math.max(dataMax, this.peak, 1);
    if (this.toScale) return Math.max(top, this.limits.buffer, this.limits.binding) * 1.05;
    // Headroom for the pinned "off the scale" line and its label.
    return top * 1.3;
  }

  /** Show the whole range up to the device limits (true) or just this run's memory. */
  setToScale(on: boolean): void {
    this.toScale = on;
    this.draw();
  }

  clear(): void {
    this.xs = [];
    this.phases = [];
    this.times = [];
    for (const c of CATEGORIES) this.own[c] = [];
    this.peak = 0;
    this.draw();
  }

  /** One step's timeline, drawn from x = step-1 to x = step. */
  addStep(step: number, m: MemoryReport): void {
    this.limits = {
      buffer: m.maxBufferSize ?? 0,
      binding: m.maxStorageBufferBindingSize ?? 0,
    };
    const tl = m.timeline ?? [];
    const end = tl.length ? Math.max(...tl.map((s) => s.t_ms), 1e-9) : 1;
    if (!tl.length) {
      // No timeline (e.g. an engine without one): one point per step from the categories' peaks.
      this.xs.push(step);
      this.phases.push('step');
      this.times.push(NaN);
      for (const c of CATEGORIES) this.own[c].push(m.categories?.[c]?.peak ?? 0);
    }
    tl.forEach((s, i) => {
      this.xs.push(step - 1 + (tl.length === 1 ? 1 : Math.max(s.t_ms / end, i === 0 ? 0 : 1e-6)));
      this.phases.push(s.phase);
      this.times.push(s.t_ms / 1000);
      for (const c of CATEGORIES) this.own[c].push(s.peak_by_category?.[c] ?? 0);
    });
    // Keep x increasing even if a timeline repeats a time.
    for (let i = 1; i < this.xs.length; i++) if (this.xs[i] <= this.xs[i - 1]) this.xs[i] = this.xs[i - 1] + 1e-6;
    this.peak = Math.max(this.peak, m.peak ?? 0);
    this.draw();
    const lim = Math.min(this.limits.buffer || Infinity, this.limits.binding || Infinity);
    this.note.textContent =
      `Peak ${bytes(m.peak)} in this step (${tl.length} phases)` +
      (tl.length > 1 ? `; seconds by phase: ${secondsByPhase(tl)}` : '') +
      (Number.isFinite(lim) ? ` · the device allows ${ibytes(this.limits.buffer)} per buffer and ${ibytes(this.limits.binding)} per binding` : '') +
      (m.wasmBytes ? ` · wasm memory ${bytes(m.wasmBytes)}` : '') +
      (m.stagedPeakBytes ? ` · at most ${bytes(m.stagedPeakBytes)} of stored weights in wasm memory at once` : '');
  }

  private draw(): void {
    // Cumulative sums, top of the stack first (see the series order).
    const n = this.xs.length;
    const cum: number[][] = [];
    const acc = new Array<number>(n).fill(0);
    for (const c of CATEGORIES) {
      const own = this.own[c];
      for (let i = 0; i < n; i++) acc[i] += own[i] ?? 0;
      cum.push([...acc]);
    }
    this.u.setData([this.xs, ...cum.reverse()]);
    this.box.dataset.points = String(n);
    this.empty.hidden = n > 0;
  }
}
