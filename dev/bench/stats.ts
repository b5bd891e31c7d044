import { spawnSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'

/**
 * A latency histogram with constant memory (log-scale buckets, 2% wide, 10 µs to ~70 s),
 * so recording 50,000 writes costs the same memory as recording 1,000: the migrating
 * process's peak RSS must not grow because we measure it.
 */
export class LatencyHistogram {
  private static readonly MIN_SECONDS = 1e-5
  private static readonly RATIO = 1.02
  private static readonly LOG_RATIO = Math.log(LatencyHistogram.RATIO)
  private readonly buckets = new Uint32Array(800)
  count = 0
  sumSeconds = 0
  maxSeconds = 0

  record(seconds: number): void {
    const i =
      seconds <= LatencyHistogram.MIN_SECONDS
        ? 0
        : Math.min(this.buckets.length - 1, Math.ceil(Math.log(seconds / LatencyHistogram.MIN_SECONDS) / LatencyHistogram.LOG_RATIO))
    this.buckets[i]!++
    this.count++
    this.sumSeconds += seconds
    if (seconds > this.maxSeconds) this.maxSeconds = seconds
  }

  /** Upper bound of the bucket holding quantile q, in milliseconds (at most 2% high). */
  quantileMs(q: number): number | null {
    if (this.count === 0) return null
    const target = Math.max(1, Math.ceil(q * this.count))
    let seen = 0
    for (let i = 0; i < this.buckets.length; i++) {
      seen += this.buckets[i]!
      if (seen >= target) return Math.min(this.maxSeconds, LatencyHistogram.MIN_SECONDS * LatencyHistogram.RATIO ** i) * 1000
    }
    return this.maxSeconds * 1000
  }

  summary(): { count: number; p50Ms: number | null; p99Ms: number | null; maxMs: number | null; meanMs: number | null } {
    return {
      count: this.count,
      p50Ms: round(this.quantileMs(0.5)),
      p99Ms: round(this.quantileMs(0.99)),
      maxMs: this.count ? round(this.maxSeconds * 1000) : null,
      meanMs: this.count ? round((this.sumSeconds / this.count) * 1000) : null,
    }
  }
}

export function round(n: number | null, digits = 2): number | null {
  if (n === null || !Number.isFinite(n)) return null
  const f = 10 ** digits
  return Math.round(n * f) / f
}

/** Peak (VmHWM) and current (VmRSS) resident set size of a process, in MiB, from /proc. */
export function memoryOf(pid: number | 'self'): { peakRssMb: number; rssMb: number } | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8')
    const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? Number.NaN)
    const peak = kb('VmHWM')
    const rss = kb('VmRSS')
    if (!Number.isFinite(peak)) return null
    return { peakRssMb: round(peak / 1024, 1)!, rssMb: round(rss / 1024, 1)! }
  } catch {
    return null
  }
}

export interface MachineInfo {
  cpuModel: string
  cores: number
  memoryGb: number
  os: string
  node: string
  kubeVersion?: string
  etcdVersion?: string
}

export function machineInfo(): MachineInfo {
  const cpus = os.cpus()
  return {
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    cores: cpus.length,
    memoryGb: round(os.totalmem() / 1024 ** 3, 1)!,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
  }
}

export function loadAverage(): number[] {
  return os.loadavg().map((l) => round(l, 2)!)
}

export interface LoadSummary {
  samples: number
  min: number | null
  mean: number | null
  max: number | null
}

/**
 * Samples the 1-minute load average every `intervalMs` until stopped: the machine's load
 * during a run, for the results (on a shared machine it explains outliers).
 */
export function sampleLoad(intervalMs = 5000): { stop(): LoadSummary } {
  const samples: number[] = [os.loadavg()[0]!]
  const timer = setInterval(() => samples.push(os.loadavg()[0]!), intervalMs)
  timer.unref()
  return {
    stop() {
      clearInterval(timer)
      samples.push(os.loadavg()[0]!)
      return {
        samples: samples.length,
        min: round(Math.min(...samples)),
        mean: round(samples.reduce((a, b) => a + b, 0) / samples.length),
        max: round(Math.max(...samples)),
      }
    },
  }
}

let clockTicks: number | undefined

/** CPU time (user + system) a process has used so far, in ms, from /proc/<pid>/stat. */
export function cpuMsOf(pid: number): number | null {
  try {
    clockTicks ??= Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    // Fields 14 and 15 of proc(5) (utime, stime); fields[0] here is field 3.
    return ((Number(fields[11]) + Number(fields[12])) / clockTicks) * 1000
  } catch {
    return null
  }
}

export interface QuietOptions {
  /** CPU of all of them together, in percent of one core, at most. Default 15. */
  maxCpuPercent?: number
  /** Over a window this long. Default 1000 ms. */
  windowMs?: number
  /** Give up (and say so) after this long. Default 60 s. */
  timeoutMs?: number
}

/**
 * Waits until the processes whose pid files are in `runDir` (the local control plane:
 * kube-apiserver, etcd, kube-controller-manager) use little CPU over a whole window.
 * After a storage flip kube-apiserver builds the CRD's storage anew, and its watch cache
 * lists and decodes every object again: on 2 cores that took a second or more, and a run
 * started at once was charged for it (the good-neighbour case saw its slowest foreground
 * requests there, before the migration had written anything). Returns how long it waited
 * and the last window's CPU, or `timedOut`.
 */
export async function waitForQuietProcesses(
  runDir: string,
  o: QuietOptions = {},
): Promise<{ waitedMs: number; cpuPercent: number; timedOut: boolean }> {
  const maxPercent = o.maxCpuPercent ?? 15
  const windowMs = o.windowMs ?? 1000
  const timeoutMs = o.timeoutMs ?? 60_000
  const pids = readdirSync(runDir)
    .filter((f) => f.endsWith('.pid'))
    .map((f) => Number(readFileSync(path.join(runDir, f), 'utf8').trim()))
    .filter((pid) => Number.isInteger(pid) && pid > 0)
  const total = () => pids.reduce((sum, pid) => sum + (cpuMsOf(pid) ?? 0), 0)
  const started = performance.now()
  for (;;) {
    const before = total()
    const t0 = performance.now()
    await sleep(windowMs)
    const percent = ((total() - before) / (performance.now() - t0)) * 100
    if (percent <= maxPercent) return { waitedMs: performance.now() - started, cpuPercent: percent, timedOut: false }
    if (performance.now() - started > timeoutMs) return { waitedMs: performance.now() - started, cpuPercent: percent, timedOut: true }
  }
}
