/**
 * How a duration is written, the one owner of the formats (milliseconds in, text out):
 *
 * | function | looks like | for |
 * |---|---|---|
 * | `wholeSeconds` | `30s` | a limit or a wait in an error message |
 * | `tenthsOfSeconds` | `12.3s` | how long a run took (the result line, the report, the `last-duration` annotation) |
 * | `clockDuration` | `7s`, `2m05s`, `1h02m` | a progress line: short, fixed places |
 * | `fullDuration` | `0s`, `1m15s`, `1h1m40s` | an ETA in `status --summary`, every unit down to seconds |
 * | `estimateDuration` | `3.2 s`, `4 min 10 s`, `1 h 5 min` | `plan`'s estimates: no more precision than they have |
 * | `flagDuration` | `5s`, `1500ms` | a flag's value said back as it was given |
 */

export function wholeSeconds(ms: number): string {
  return `${Math.round(ms / 1000)}s`
}

export function tenthsOfSeconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)}s`
}

/** Hours show no seconds. */
export function clockDuration(ms: number): string {
  const whole = Math.round(ms / 1000)
  if (whole < 60) return `${whole}s`
  if (whole < 3600) return `${Math.floor(whole / 60)}m${String(whole % 60).padStart(2, '0')}s`
  return `${Math.floor(whole / 3600)}h${String(Math.floor((whole % 3600) / 60)).padStart(2, '0')}m`
}

/** Rounded to whole seconds first, so never `60s`. */
export function fullDuration(ms: number): string {
  const whole = Math.round(ms / 1000)
  const h = Math.floor(whole / 3600)
  const m = Math.floor((whole % 3600) / 60)
  const s = whole % 60
  return `${h ? `${h}h` : ''}${h || m ? `${m}m` : ''}${s}s`
}

/** Over an hour rounded to whole minutes first, so never `60 min`. */
export function estimateDuration(ms: number): string {
  const s = Math.round(ms / 100) / 10
  if (s < 60) return `${s} s`
  const total = Math.round(ms / 1000)
  if (total < 3600) return `${Math.floor(total / 60)} min ${total % 60} s`
  const minutes = Math.round(total / 60)
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`
}

export function flagDuration(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000}s` : `${ms}ms`
}
