/**
 * What `migrate` says about CRDs in flight (rate, ETA; live, periodic and final lines).
 * Pure: the clock is passed in, so every line can be tested as a table.
 */
import type { MigrationResult } from '../../migrator/context.js'
import { settled, type WalkProgress } from '../../migrator/engine/walker.js'
import { unfreezeCommand } from '../interrupt.js'
import { ellipsize } from '../../sanitize.js'
import { clockDuration } from '../../duration.js'

/** How far one phase of one CRD got: objects settled of the best known total. */
interface PhaseCount {
  phase: string
  done: number
  total: number
}

/** The objects settled per second over the last WINDOW_MS (the phase's whole time when shorter). */
const WINDOW_MS = 10_000

/** One CRD's progress as the walks report it, with a rate over a sliding window. */
export class CrdProgress {
  /** Every phase walked so far, the current one last. */
  readonly phases: PhaseCount[] = []
  private samples: Array<[number, number]> = []

  constructor(
    readonly crd: string,
    readonly startedAt: number,
  ) {}

  get current(): PhaseCount | undefined {
    return this.phases[this.phases.length - 1]
  }

  update(phase: string, p: WalkProgress, now: number): void {
    const done = settled(p)
    const total = Math.max(p.total ?? 0, p.counts.seen, done)
    let current = this.current
    if (current?.phase !== phase) {
      current = { phase, done: 0, total: 0 }
      this.phases.push(current)
      this.samples = []
    }
    current.done = done
    current.total = total
    const last = this.samples[this.samples.length - 1]
    if (last && now - last[0] < 250) last[1] = done
    else this.samples.push([now, done])
    while (this.samples.length > 2 && now - this.samples[1]![0] >= WINDOW_MS) this.samples.shift()
  }

  /** Objects per second in the current phase; undefined before a second of it has passed. */
  rate(now: number): number | undefined {
    const first = this.samples[0]
    const current = this.current
    if (!first || !current || now - first[0] < 1000) return undefined
    return (current.done - first[1]) / ((now - first[0]) / 1000)
  }
}

/** Seconds until the current phase is done at this rate; undefined when it cannot be told. */
export function etaSeconds(count: PhaseCount | undefined, rate: number | undefined): number | undefined {
  if (!count || rate === undefined || rate <= 0) return undefined
  return Math.max(0, Math.ceil((count.total - count.done) / rate))
}

const percent = (c: PhaseCount) => (c.total > 0 ? Math.floor((c.done / c.total) * 100) : 0)
const rateText = (rate: number | undefined) => (rate === undefined ? '-' : `${rate < 10 ? rate.toFixed(1) : Math.round(rate)}`)

/** Off a terminal, every few seconds: `widgets.example.com: StorageVersionMigration 1744/4000 (43%), 180 objects/s, ETA 13s`. */
export function plainLine(p: CrdProgress, now: number): string {
  const c = p.current
  if (!c) return `${p.crd}: preparing (freeze, storage switch, checks), ${clockDuration(now - p.startedAt)} in`
  const rate = p.rate(now)
  const eta = etaSeconds(c, rate)
  return `${p.crd}: ${c.phase} ${c.done}/${c.total} (${percent(c)}%), ${rateText(rate)} objects/s, ETA ${eta === undefined ? '-' : clockDuration(eta * 1000)}`
}

const BAR = 20

/** Phase names short enough for an 80-column terminal, used when the full ones do not fit. */
const SHORT_PHASE: Record<string, string> = {
  StorageVersionMigration: 'rewrite',
  StashedObjectMigration: 'stashes',
  CleanupManagedFields: 'cleanup',
}

/** On a terminal (docs/migrate-one-crd.md#watching-a-run), the numbers first so no width loses them; the CRD's name is cut last. */
export function liveLine(p: CrdProgress, now: number, width = 200): string {
  const c = p.current
  const fit = width - 1 // as wide as the terminal would wrap, and the redraw would then miscount its lines
  if (!c) return ellipsize(`${clockDuration(now - p.startedAt)}  ${p.crd}  preparing (freeze, storage switch, checks)`, fit)
  const rate = p.rate(now)
  const eta = etaSeconds(c, rate)
  const numbers = `${c.done}/${c.total}  ${percent(c)}%  ${rateText(rate)}/s  ETA ${eta === undefined ? '-' : clockDuration(eta * 1000)}`
  const filled = c.total > 0 ? Math.round((c.done / c.total) * BAR) : 0
  const bar = `[${'#'.repeat(filled)}${'-'.repeat(BAR - filled)}]`
  const short = SHORT_PHASE[c.phase] ?? c.phase
  const candidates = [`${numbers}  ${p.crd}  ${c.phase}  ${bar}`, `${numbers}  ${p.crd}  ${c.phase}`, `${numbers}  ${p.crd}  ${short}`]
  return candidates.find((line) => line.length <= fit) ?? ellipsize(`${numbers}  ${short}  ${p.crd}`, fit)
}

/** Each phase walked; the cleanup's are `checked`: it writes only some of them (see the managedFields line). */
function phasesText(p: CrdProgress | undefined): string {
  return (p?.phases ?? [])
    .map((c) => `${c.phase} ${c.done}/${c.total} objects${c.phase === 'CleanupManagedFields' ? ' checked' : ''}`)
    .join(', ')
}

/** The permanent line when a CRD ends, on a terminal and off it. */
export function finishLine(
  crd: string,
  end: Pick<MigrationResult, 'outcome' | 'errorCode' | 'durationMs' | 'leftFrozen' | 'skipReason'> | { error: string },
  progress: CrdProgress | undefined,
  annotation: string,
): string {
  const walked = phasesText(progress)
  if ('error' in end) return `${crd}: ${end.error}${walked ? ` (after ${walked})` : ''}`
  if (end.outcome === 'Skipped') return `${crd}: Skipped${end.skipReason ? ` (${end.skipReason})` : ''}`
  const freeze = end.leftFrozen
    ? `; the freeze could NOT be lifted: ${unfreezeCommand(crd, annotation)}`
    : end.errorCode === 'CRDM_FREEZE_TAKEN_OVER'
      ? '; freeze left to the instance that took it over'
      : end.outcome === 'Blocked'
        ? '; nothing frozen'
        : '; freeze lifted'
  const took = clockDuration(end.durationMs)
  if (end.errorCode === 'CRDM_ABORTED') {
    const c = progress?.current
    const where = c ? `in ${c.phase} at ${c.done} of ${c.total} objects` : 'before any object was written'
    return `${crd}: stopped ${where} after ${took}${freeze}`
  }
  const outcome = `${end.outcome}${end.errorCode ? ` (${end.errorCode})` : ''}`
  return `${crd}: ${outcome} in ${took}${walked ? `: ${walked}` : ''}${freeze}`
}
