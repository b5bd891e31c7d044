/**
 * Adaptive concurrency of a migration's writes, up to the configured concurrency (the cap): a
 * fixed number is too low for a big API server or too high for a busy one, where more writes in
 * flight add only latency, for every client, and no throughput.
 *
 * The signal is our writes' latency against its floor (the lowest seen, at the start with few in
 * flight): waiting in the API server (CPU, etcd, an APF queue) shows as latency above it. One
 * decision per window of answers (decideLimit; the rules: docs/migrate-one-crd.md#one-migration-step-by-step),
 * and a 429 halves the limit at once (throttled()).
 *
 * Past the tolerance, throughput decides: etcd batches concurrent writes, so on a slow machine the
 * knee sits far above the floor (docs/performance.md, "The adaptive limit on a slower machine").
 * While the limit buys {@link SCALING_GAIN} more answers/s than the best at 50–80 % of it, it still
 * grows; it comes down only when more in flight bought nothing.
 */

export interface AdaptiveSettings {
  /** The cap: the configured concurrency. */
  max: number
  /** Default 1. */
  min?: number
  /** Where the limit starts (default 1, so the floor is measured with little in flight). */
  initial?: number
  /** The limit grows while a window's median latency is at most this many times the floor. Default {@link DEFAULT_TOLERANCE}. */
  tolerance?: number
  /** Answers per window at least (and at least the limit; at most four per request in flight). Default 16. */
  minSamples?: number
}

/**
 * How far above its floor latency may go while the limit still grows. Past the knee (throughput
 * X), Little's law gives latency/floor = N × (one write's rate alone) / X. Measured (npm run bench,
 * 2 cores): ~100/s alone, X 200–350/s, knee 12–16 in flight, so 5–8×; 8 reaches the knee, 12 let
 * a slower API server climb to 2–4× the knee for no throughput.
 */
export const DEFAULT_TOLERANCE = 8
/** Decrease only past tolerance × this: the dead band keeps noise from flapping the limit. */
const DECREASE_MARGIN = 1.25
const DECREASE_FACTOR = 0.75
const DECREASE_STRIKES = 2
/** Past the tolerance the limit still grows while its throughput beats the best at 50–80 % of it by this much. */
const SCALING_GAIN = 1.05
/** Weight of a new window in a limit's smoothed throughput (the rest: what was seen there before). */
const RATE_WEIGHT = 0.5

/** One window of answers, all to requests started under the same limit. */
export interface LatencyWindow {
  /** The limit while those requests were sent. */
  limit: number
  samples: number
  medianMs: number
  /** Whether the requests in flight reached the limit during the window (else demand, not the limit, bounded them). */
  saturated: boolean
  /** Answers per second during the window (every answer, also to requests sent before it opened); absent: latency alone decides. */
  ratePerSecond?: number
}

export interface LimitState {
  limit: number
  /** Lowest window median seen so far; null before the first window. */
  floorMs: number | null
  /** Doubling until the latency first rises past half the tolerance, or a 429. */
  slowStart: boolean
  /** Smoothed answers per second seen at each limit while it was reached. */
  rates?: Readonly<Record<number, number>>
  /** Windows in a row past the decrease threshold so far (one alone is a spike: a pause, a compaction). */
  strikes?: number
}

export type LimitDecision = 'slow-start' | 'increase' | 'hold' | 'idle' | 'decrease'

function resolve(s: AdaptiveSettings): Required<AdaptiveSettings> {
  const max = Math.max(1, Math.floor(s.max))
  const min = Math.min(max, Math.max(1, Math.floor(s.min ?? 1)))
  return {
    max,
    min,
    initial: Math.min(max, Math.max(min, Math.floor(s.initial ?? 1))),
    tolerance: s.tolerance ?? DEFAULT_TOLERANCE,
    minSamples: Math.max(1, Math.floor(s.minSamples ?? 16)),
  }
}

export function initialLimitState(settings: AdaptiveSettings): LimitState {
  return { limit: resolve(settings).initial, floorMs: null, slowStart: true }
}

export function decideLimit(
  state: LimitState,
  window: LatencyWindow,
  settings: AdaptiveSettings,
): { state: LimitState; decision: LimitDecision } {
  const s = resolve(settings)
  const floorMs = Math.max(Number.EPSILON, state.floorMs === null ? window.medianMs : Math.min(state.floorMs, window.medianMs))
  const ratio = window.medianMs / floorMs
  const rates = recordRate(state.rates, window)
  const next = (limit: number, slowStart: boolean, decision: LimitDecision, strikes = 0) => ({
    state: {
      limit: Math.min(s.max, Math.max(s.min, limit)),
      floorMs,
      slowStart,
      ...(rates ? { rates } : {}),
      ...(strikes ? { strikes } : {}),
    },
    decision,
  })
  if (ratio > s.tolerance) {
    const gain = throughputGain(rates, window)
    if (gain !== undefined && gain >= SCALING_GAIN) return next(state.limit + 1, false, 'increase')
    // No gain measured yet, or none left: latency alone decides, as below the knee's throughput.
    if (ratio > s.tolerance * DECREASE_MARGIN && (gain === undefined || gain < 1)) {
      const strikes = (state.strikes ?? 0) + 1
      if (strikes >= DECREASE_STRIKES) return next(Math.floor(state.limit * DECREASE_FACTOR), false, 'decrease')
      return next(state.limit, false, 'hold', strikes)
    }
    return next(state.limit, false, 'hold')
  }
  // A limit nobody reached says nothing about a higher one.
  if (!window.saturated) return next(state.limit, state.slowStart, 'idle')
  if (state.slowStart && ratio <= s.tolerance / 2) return next(state.limit * 2, true, 'slow-start')
  return next(state.limit + 1, false, 'increase')
}

/** The window's throughput folded into its limit's smoothed rate (only a saturated window measures the limit). */
function recordRate(rates: LimitState['rates'], window: LatencyWindow): LimitState['rates'] {
  if (window.ratePerSecond === undefined || !window.saturated || !(window.ratePerSecond > 0)) return rates
  const before = rates?.[window.limit]
  const rate = before === undefined ? window.ratePerSecond : before * (1 - RATE_WEIGHT) + window.ratePerSecond * RATE_WEIGHT
  return { ...rates, [window.limit]: rate }
}

/** This limit's smoothed throughput over the best at 50–80 % of it (above 1: more in flight bought more); undefined without both. */
function throughputGain(rates: LimitState['rates'], window: LatencyWindow): number | undefined {
  const here = rates?.[window.limit]
  if (here === undefined || !window.saturated) return undefined
  let best: number | undefined
  for (const [limit, rate] of Object.entries(rates!)) {
    const l = Number(limit)
    if (l >= window.limit * 0.5 && l <= window.limit * 0.8 && (best === undefined || rate > best)) best = rate
  }
  return best === undefined ? undefined : here / best
}

export function throttledLimit(state: LimitState, settings: AdaptiveSettings): LimitState {
  const s = resolve(settings)
  return { ...state, limit: Math.max(s.min, Math.floor(state.limit / 2)), slowStart: false }
}

/** Collects answers into windows for {@link decideLimit}; only requests started since the window opened count (all under its limit). */
export class AdaptiveConcurrency {
  private state: LimitState
  private readonly minSamples: number
  private windowStart: number
  private samples: Float64Array
  private count = 0
  private saturated = false
  /** When the window opened, and every answer since (also to requests sent before): its throughput. */
  private windowOpenedAt: number
  private answersInWindow = 0
  private lastDecrease = Number.NEGATIVE_INFINITY
  /** Decisions so far, by kind (for logs and tests). */
  readonly decisions: Record<LimitDecision | 'throttled', number> = {
    'slow-start': 0,
    increase: 0,
    hold: 0,
    idle: 0,
    decrease: 0,
    throttled: 0,
  }

  constructor(
    private readonly settings: AdaptiveSettings,
    private readonly onChange?: (limit: number) => void,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.minSamples = resolve(settings).minSamples
    this.state = initialLimitState(settings)
    this.windowStart = this.now()
    this.windowOpenedAt = this.windowStart
    this.samples = new Float64Array(Math.max(this.minSamples, resolve(settings).max))
  }

  get limit(): number {
    return this.state.limit
  }

  get floorMs(): number | null {
    return this.state.floorMs
  }

  /** Call when a request is sent with `inFlight` requests (this one included) in flight. */
  started(inFlight: number): void {
    if (inFlight >= this.state.limit) this.saturated = true
  }

  /** An answer (anything but a 429) to a request sent at `startedAt` (this clock), after `latencyMs`. */
  answered(startedAt: number, latencyMs: number): void {
    this.answersInWindow++
    if (startedAt < this.windowStart) return
    this.samples[this.count++] = latencyMs
    // At least the limit and minSamples, but at most four rounds at a small limit: through a slow
    // conversion webhook a write takes half a second, and slow start must not take minutes.
    const needed = Math.max(this.state.limit, Math.min(this.minSamples, 4 * this.state.limit))
    if (this.count >= needed || this.count === this.samples.length) this.closeWindow()
  }

  /** A 429 to a request sent at `startedAt`: halves the limit, unless lowered since it went out (one burst of 429s, one decrease). */
  throttled(startedAt: number): void {
    if (startedAt <= this.lastDecrease) return
    this.decisions.throttled++
    this.apply(throttledLimit(this.state, this.settings))
    this.lastDecrease = this.now()
  }

  private closeWindow(): void {
    const now = this.now()
    const elapsedMs = now - this.windowOpenedAt
    const window: LatencyWindow = {
      limit: this.state.limit,
      samples: this.count,
      medianMs: median(this.samples.subarray(0, this.count)),
      saturated: this.saturated,
      ...(elapsedMs > 0 ? { ratePerSecond: (this.answersInWindow * 1000) / elapsedMs } : {}),
    }
    const { state, decision } = decideLimit(this.state, window, this.settings)
    this.decisions[decision]++
    if (decision === 'decrease') this.lastDecrease = this.now()
    this.apply(state)
  }

  private apply(state: LimitState): void {
    const changed = state.limit !== this.state.limit
    this.state = state
    this.count = 0
    this.saturated = false
    this.windowOpenedAt = this.now()
    this.answersInWindow = 0
    if (!changed) return
    // Answers to requests sent under the old limit say nothing about the new one.
    this.windowStart = this.now()
    if (this.samples.length < state.limit) this.samples = new Float64Array(state.limit)
    this.onChange?.(state.limit)
  }
}

function median(values: Float64Array): number {
  const sorted = Float64Array.from(values).sort()
  const mid = sorted.length >> 1
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}
