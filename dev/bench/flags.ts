/**
 * The bench's flags: their parsing, `--help`, and the settings a run uses (sizes, sweep,
 * the cases' parameters), each with its default and its --smoke default. A bad flag stops
 * the bench here, with exit code 2 and a message.
 */
import path from 'node:path'
import { parseArgs } from 'node:util'
import { productNodeFlags } from './product-flags.js'

const BENCH_OPTIONS = {
  sizes: { type: 'string' },
  out: { type: 'string', default: 'bench/results' },
  'skip-ksvm': { type: 'boolean', default: false },
  'skip-webhook': { type: 'boolean', default: false },
  smoke: { type: 'boolean', default: false },
  sweep: { type: 'string' },
  'controlplane-state': { type: 'string' },
  'ksvm-if-cached': { type: 'boolean', default: false },
  'ksvm-manifest-max': { type: 'string' },
  'ksvm-default-max': { type: 'string' },
  'ours-only-above': { type: 'string' },
  'webhook-seconds': { type: 'string' },
  'skip-migrations': { type: 'boolean', default: false },
  'skip-conversion': { type: 'boolean', default: false },
  'conversion-only': { type: 'boolean', default: false },
  'conversion-sizes': { type: 'string' },
  'conversion-delay': { type: 'string' },
  'skip-conversion-probe': { type: 'boolean', default: false },
  'child-node-options': { type: 'string' },
  repeat: { type: 'string' },
  'skip-neighbour': { type: 'boolean', default: false },
  'neighbour-size': { type: 'string' },
  'foreground-rate': { type: 'string' },
  'foreground-idle-seconds': { type: 'string' },
  'apf-shares': { type: 'string' },
  help: { type: 'boolean', short: 'h', default: false },
} as const

const USAGE = `Usage: npm run bench -- [flags]   (or: node dist-dev/dev/bench/main.js [flags])

Migrates N objects with the ceiling, ours (best concurrency and defaults) and
kube-storage-version-migrator on a local control plane, the same for ours and the
ceiling with a CRD converting through an HTTPS conversion webhook (ConversionReviews
counted), load-tests the webhook with vegeta, and writes <out>/latest.json and
<out>/latest.md.

  --sizes 1000,10000,50000,100000  object counts (default; --smoke: 200)
  --sweep 16,32,64           concurrencies tried on the smallest size (--smoke: 16)
  --out DIR                  where the results go (default bench/results)
  --skip-ksvm                no kube-storage-version-migrator runs
  --ksvm-if-cached           run KSVM only if scripts/build-ksvm.sh already built it
  --ksvm-manifest-max N      largest size for KSVM at its manifest's QPS (default 10000)
  --ksvm-default-max N       largest size for KSVM at client-go's default QPS (default 1000)
  --ours-only-above N        sizes above N run ours at its defaults alone (its peak-RSS
                             growth), without the ceiling, ours-best or KSVM (default: none)
  --skip-webhook             no webhook load test
  --webhook-seconds S        seconds per webhook case (default 10; --smoke: 1)
  --repeat N                 attacks per webhook case, ours and the floor taking turns; the
                             results are the medians (default 3; --smoke: 1)
  --skip-migrations          only the webhook load test (no control plane)
  --skip-conversion          no conversion-webhook case
  --conversion-only          the conversion-webhook case alone: no sweeps, no plain-CRD
                             or KSVM runs (ours-best and the ceiling at the first --sweep value)
  --conversion-sizes 1000    object counts of the conversion case (default 1000; --smoke: 30)
  --conversion-delay MS      the slow webhook's delay per ConversionReview (default 50, --smoke: 0;
                             0 = no slow-webhook runs)
  --skip-conversion-probe    no per-request probe of ConversionReview costs
  --skip-neighbour           no good-neighbour case (foreground client, with and without
                             the chart's API Priority and Fairness objects)
  --neighbour-size N         objects migrated in the good-neighbour case (default 10000; --smoke: 100)
  --foreground-rate R        the foreground client's requests per second (default 40)
  --foreground-idle-seconds S  how long the foreground runs alone first (default 20; --smoke: 2)
  --apf-shares N             nominalConcurrencyShares of the migrator's priority level
                             (default: the chart's values.yaml)
  --controlplane-state FILE  use a running control plane (npm run cluster) instead of starting one
  --child-node-options=FLAGS node flags for the ours and ceiling processes, e.g.
                             --child-node-options=--max-old-space-size=128 (note the =)
  --smoke                    the small sizes npm test runs
  -h, --help                 this text
`

type BenchFlags = ReturnType<typeof parseFlags>

/** What a bench run does, from its flags. */
export interface BenchSettings {
  smoke: boolean
  /** Object counts of the plain-CRD runs, ascending (none with --skip-migrations or --conversion-only). */
  sizes: number[]
  conversionOnly: boolean
  /** Object counts of the conversion case (none when it is skipped). */
  conversionSizes: number[]
  /** The slow webhook's delay per ConversionReview; 0 = no slow-webhook runs. */
  conversionDelayMs: number
  /** Concurrencies of ours and the ceiling tried on the smallest size. */
  sweep: number[]
  ksvmManifestMax: number
  ksvmDefaultMax: number
  webhookSeconds: number
  /** Where latest.json, latest.md and the neighbour samples go (absolute). */
  outDir: string
  /** Attacks per webhook case. */
  repeat: number
  /** Objects of the good-neighbour case; 0 = no such case. */
  neighbourSize: number
  foregroundRate: number
  foregroundIdleSeconds: number
  /** nominalConcurrencyShares of the migrator's priority level; none = the chart's. */
  apfShares: number | undefined
  /** Sizes above this run ours at its defaults alone (Infinity: none). */
  oursOnlyAbove: number
  /** Node flags given for the ours and ceiling processes. */
  childNodeOptions: string[]
  /** Ours runs with the flags the product's executable sets (productNodeFlags), then any given; the ceiling with Node's defaults. */
  oursNodeFlags: string[]
  skipKsvm: boolean
  ksvmIfCached: boolean
  skipWebhook: boolean
  skipMigrations: boolean
  skipConversionProbe: boolean
  /** A running control plane's state file (npm run cluster), instead of starting one. */
  controlplaneState: string | undefined
}

function parseFlags() {
  try {
    return parseArgs({ options: BENCH_OPTIONS, strict: true }).values
  } catch (err) {
    process.stderr.write(`bench: ${(err as Error).message}\nSee: npm run bench -- --help\n`)
    process.exit(2)
  }
}

const sizeList = (text: string) =>
  text
    .split(',')
    .map((s) => Number(s.trim()))
    .filter((n) => n > 0)
    .sort((a, b) => a - b)

/** A flag's whole number >= `min`, or the default; anything else stops the bench with a message. */
function intFlag(flags: BenchFlags, name: keyof typeof BENCH_OPTIONS, fallback: number, min = 1): number {
  const text = flags[name] as string | undefined
  if (text === undefined) return fallback
  const n = Number(text)
  if (!Number.isInteger(n) || n < min) {
    process.stderr.write(`bench: --${name} takes a whole number of at least ${min}, not ${text}\n`)
    process.exit(2)
  }
  return n
}

/** The process's flags as settings; `--help` prints the usage and exits 0, a bad flag exits 2. */
export function benchSettings(): BenchSettings {
  const flags = parseFlags()
  if (flags.help) {
    process.stdout.write(USAGE)
    process.exit(0)
  }

  const smoke = flags.smoke
  const conversionOnly = flags['conversion-only']
  const sizes = flags['skip-migrations'] || conversionOnly ? [] : sizeList(flags.sizes ?? (smoke ? '200' : '1000,10000,50000,100000'))
  const conversionSizes =
    flags['skip-migrations'] || (flags['skip-conversion'] && !conversionOnly)
      ? []
      : sizeList(flags['conversion-sizes'] ?? (smoke ? '30' : '1000'))
  const conversionDelayMs = Number(flags['conversion-delay'] ?? (smoke ? 0 : 50))
  if (!Number.isFinite(conversionDelayMs) || conversionDelayMs < 0) {
    process.stderr.write(`bench: --conversion-delay takes milliseconds (0 or more), not ${flags['conversion-delay']}\n`)
    process.exit(2)
  }
  const sweep = (flags.sweep ?? (smoke ? '16' : '16,32,64')).split(',').map(Number)
  const ksvmManifestMax = Number(flags['ksvm-manifest-max'] ?? (smoke ? 0 : 10_000))
  const ksvmDefaultMax = Number(flags['ksvm-default-max'] ?? (smoke ? 0 : 1000))
  const webhookSeconds = Number(flags['webhook-seconds'] ?? (smoke ? 1 : 10))
  const outDir = path.resolve(flags.out)
  const repeat = intFlag(flags, 'repeat', smoke ? 1 : 3)
  const neighbourSize =
    flags['skip-neighbour'] || flags['skip-migrations'] || conversionOnly ? 0 : intFlag(flags, 'neighbour-size', smoke ? 100 : 10_000)
  const foregroundRate = intFlag(flags, 'foreground-rate', 40)
  const foregroundIdleSeconds = intFlag(flags, 'foreground-idle-seconds', smoke ? 2 : 20)
  const apfShares = flags['apf-shares'] === undefined ? undefined : intFlag(flags, 'apf-shares', 0)
  const oursOnlyAbove = flags['ours-only-above'] === undefined ? Infinity : intFlag(flags, 'ours-only-above', 0)
  const childNodeOptions = (flags['child-node-options'] ?? '').split(/\s+/).filter(Boolean)
  const oursNodeFlags = productNodeFlags()

  return {
    smoke,
    sizes,
    conversionOnly,
    conversionSizes,
    conversionDelayMs,
    sweep,
    ksvmManifestMax,
    ksvmDefaultMax,
    webhookSeconds,
    outDir,
    repeat,
    neighbourSize,
    foregroundRate,
    foregroundIdleSeconds,
    apfShares,
    oursOnlyAbove,
    childNodeOptions,
    oursNodeFlags,
    skipKsvm: flags['skip-ksvm'],
    ksvmIfCached: flags['ksvm-if-cached'],
    skipWebhook: flags['skip-webhook'],
    skipMigrations: flags['skip-migrations'],
    skipConversionProbe: flags['skip-conversion-probe'],
    controlplaneState: flags['controlplane-state'],
  }
}
