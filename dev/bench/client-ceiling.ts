#!/usr/bin/env node
/**
 * `npm run bench:client` (issue #37, item 3): what ONE crd-migrator process can drive when
 * the API server is not the bound. A stub API server that answers cheaply
 * (client-ceiling-stub.ts, its own process) serves one resource of N objects; the product's
 * real storage phase (client-ceiling-client.ts, its own process: runPhase with the
 * product's KubeHttp) lists and rewrites all of them, at the product's default concurrency
 * and at higher caps, each with the product's node flags (the CLI's shebang) and without.
 * Per run: objects/s, the client's CPU per 1,000 objects and cores used, the stub's, and
 * the client's writes per second per core (objects / client CPU seconds). Writes
 * <out>/latest.md and .json (<out>/smoke.* with --smoke).
 *
 * `--help` lists the flags.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import type { ClientInput, ClientOutput } from './client-ceiling-client.js'
import type { StubStats } from './client-ceiling-resource.js'
import { renderClientCeiling, type CeilingRun, type ClientCeilingReport } from './client-ceiling-report.js'
import { productNodeFlags } from './product-flags.js'
import { runJsonChild } from './run-child.js'
import { loadAverage, machineInfo, round, sampleLoad } from './stats.js'

const log = (s: string) => process.stderr.write(`[client-ceiling ${new Date().toISOString().slice(11, 19)}] ${s}\n`)
const here = (file: string) => fileURLToPath(new URL(file, import.meta.url))
const STUB_JS = here('./client-ceiling-stub.js')
const CLIENT_JS = here('./client-ceiling-client.js')

const OPTIONS = {
  objects: { type: 'string' },
  concurrency: { type: 'string' },
  repeat: { type: 'string' },
  out: { type: 'string', default: 'bench/results/client-ceiling' },
  smoke: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
} as const

const USAGE = `Usage: npm run bench:client -- [flags]   (or: node dist-dev/dev/bench/client-ceiling.js [flags])

The client's own ceiling: the product's storage phase (list metadata + no-op merge patches,
its KubeHttp, its adaptive limit) against a stub API server that answers cheaply, each in
its own process. Every run once with the product's node flags and once without.

  --objects N          objects in the stub's resource (default 50000; --smoke 2000)
  --concurrency A,B    caps to run besides the product's default (default 128,256; --smoke none)
  --repeat N           run each cap and flag pair N times (default 1)
  --out DIR            where latest.md and latest.json go (default bench/results/client-ceiling;
                       --smoke writes smoke.md and smoke.json there)
  --smoke              a few seconds: 2,000 objects, the default concurrency only
  -h, --help           this text
`

function positiveInt(flag: string, value: string): number {
  const n = Number(value)
  if (!Number.isInteger(n) || n < 1) throw new UsageError(`--${flag} must be a positive integer, got ${JSON.stringify(value)}`)
  return n
}

class UsageError extends Error {}

/** Starts the stub with `objects` objects; resolves once it listens. */
function startStub(objects: number): Promise<{ child: ChildProcess; url: string; caCertFile: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [STUB_JS, String(objects)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
    child.once('error', reject)
    child.once('exit', (code) => reject(new Error(`the stub exited with ${code} before it listened`)))
    child.once('message', (m) => {
      const { url, caCertFile } = m as { url: string; caCertFile: string }
      child.removeAllListeners('exit')
      resolve({ child, url, caCertFile })
    })
  })
}

/** Asks the stub for its counts and CPU (`reset` first sets its objects and counts back); fails if it has exited. */
function stubStats(stub: ChildProcess, op: 'reset' | 'stats'): Promise<StubStats> {
  return new Promise((resolve, reject) => {
    if (stub.exitCode !== null || stub.signalCode !== null)
      return reject(new Error(`the stub exited (${stub.exitCode ?? stub.signalCode})`))
    const onExit = (code: number | null, signal: string | null) => {
      stub.off('message', onMessage)
      reject(new Error(`the stub exited with ${code ?? signal}`))
    }
    const onMessage = (m: unknown) => {
      const answer = m as { op?: string; stats: StubStats }
      if (answer.op !== op) return
      stub.off('message', onMessage)
      stub.off('exit', onExit)
      resolve(answer.stats)
    }
    stub.on('message', onMessage)
    stub.once('exit', onExit)
    stub.send({ op })
  })
}

/** Runs the client once with `nodeFlags`; its JSON line, or an error with its exit code. */
function runClient(nodeFlags: string[], input: ClientInput, timeoutMs: number): Promise<ClientOutput> {
  return runJsonChild<ClientOutput>([...nodeFlags, CLIENT_JS], input, timeoutMs, 'the client')
}

function kubeconfigFor(url: string, caCertFile: string): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    `- name: stub`,
    '  cluster:',
    `    server: ${url}`,
    `    certificate-authority: ${caCertFile}`,
    'users:',
    '- name: bench',
    '  user:',
    '    token: client-ceiling',
    'contexts:',
    '- name: stub',
    '  context:',
    '    cluster: stub',
    '    user: bench',
    'current-context: stub',
    '',
  ].join('\n')
}

/** What one run measured, as the report shows it; `error` when the product did not rewrite every object once. */
function measure(
  objects: number,
  cap: number | undefined,
  flags: 'product' | 'none',
  client: ClientOutput,
  before: StubStats,
  after: StubStats,
): CeilingRun {
  const seconds = client.wallMs / 1000
  const stubCpuMs = after.cpuMs - before.cpuMs
  const problems: string[] = []
  if (client.counts['rewritten'] !== objects) problems.push(`rewritten ${client.counts['rewritten']} of ${objects}`)
  if (after.distinctPatched !== objects) problems.push(`the stub saw ${after.distinctPatched} distinct objects patched`)
  if (after.refused > 0) problems.push(`the stub refused ${after.refused} request(s): ${after.refusedSamples.join('; ')}`)
  return {
    concurrency: cap === undefined ? `default (${client.settings.concurrency})` : String(cap),
    nodeFlags: flags === 'product' ? client.nodeFlags.join(' ') : 'none',
    objects,
    objectsPerSecond: round(objects / seconds, 0)!,
    wallSeconds: round(seconds, 2)!,
    clientCpuMsPer1000: round((client.cpuMs / objects) * 1000, 0)!,
    clientCores: round(client.cpuMs / client.wallMs, 2)!,
    clientUserMs: round(client.userMs, 0)!,
    clientSystemMs: round(client.systemMs, 0)!,
    eventLoopUtilization: round(client.eventLoopUtilization, 2)!,
    gcMs: round(client.gcMs, 0)!,
    gcCount: client.gcCount,
    writesPerClientCoreSecond: round(objects / (client.cpuMs / 1000), 0)!,
    stubCpuMsPer1000: round((stubCpuMs / objects) * 1000, 0)!,
    stubCores: round(stubCpuMs / client.wallMs, 2)!,
    listPages: after.listPages,
    patches: after.patches,
    adaptiveLimitAtEnd: client.adaptive?.limit ?? null,
    retries: client.retries,
    peakRssMb: client.peakRssMb,
    ...(problems.length ? { error: problems.join('; ') } : {}),
  }
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: OPTIONS, strict: true, allowPositionals: false })
  if (values.help) {
    process.stdout.write(USAGE)
    return 0
  }
  const smoke = values.smoke
  const objects = values.objects !== undefined ? positiveInt('objects', values.objects) : smoke ? 2_000 : 50_000
  const caps: Array<number | undefined> = [
    undefined,
    ...(values.concurrency !== undefined
      ? values.concurrency.split(',').map((c) => positiveInt('concurrency', c.trim()))
      : smoke
        ? []
        : [128, 256]),
  ]
  const repeat = values.repeat !== undefined ? positiveInt('repeat', values.repeat) : 1
  const productFlags = productNodeFlags()
  const machine = machineInfo()
  const loadBefore = loadAverage()
  const load = sampleLoad()
  const startedAt = new Date().toISOString()
  log(`${objects} objects; caps ${caps.map((c) => c ?? 'default').join(', ')}; node flags: ${productFlags.join(' ')} and none`)
  const dir = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-client-ceiling-'))
  const stub = await startStub(objects)
  const runs: CeilingRun[] = []
  try {
    const kubeconfigPath = path.join(dir, 'kubeconfig')
    await writeFile(kubeconfigPath, kubeconfigFor(stub.url, stub.caCertFile), { mode: 0o600 })
    // Runs of one cap back to back, flags alternating, so a change of the machine's load hits both alike.
    for (const cap of caps) {
      for (const flags of Array.from({ length: repeat }, () => ['product', 'none'] as const).flat()) {
        const before = await stubStats(stub.child, 'reset')
        const client = await runClient(
          flags === 'product' ? productFlags : [],
          { kubeconfigPath, ...(cap !== undefined ? { concurrency: cap } : {}) },
          Math.max(120_000, objects * 10),
        )
        const run = measure(objects, cap, flags, client, before, await stubStats(stub.child, 'stats'))
        runs.push(run)
        log(
          `cap ${run.concurrency}, flags ${flags}: ${run.objectsPerSecond} objects/s, client ${run.clientCpuMsPer1000} ms CPU/1k ` +
            `(${run.clientCores} cores, ELU ${run.eventLoopUtilization}), ${run.writesPerClientCoreSecond} writes/s per client core, ` +
            `stub ${run.stubCpuMsPer1000} ms CPU/1k${run.error ? `; FAILED: ${run.error}` : ''}`,
        )
      }
    }
  } finally {
    stub.child.kill('SIGTERM')
    await rm(dir, { recursive: true, force: true })
  }
  const report: ClientCeilingReport = {
    command: `npm run bench:client --${argv.length ? ` ${argv.join(' ')}` : ''}`,
    startedAt,
    machine,
    loadBefore,
    loadDuring: load.stop(),
    loadAfter: loadAverage(),
    objects,
    productNodeFlags: productFlags,
    smoke,
    runs,
  }
  await mkdir(values.out, { recursive: true })
  const name = smoke ? 'smoke' : 'latest'
  await writeFile(path.join(values.out, `${name}.json`), `${JSON.stringify(report, null, 2)}\n`)
  await writeFile(path.join(values.out, `${name}.md`), renderClientCeiling(report))
  log(`wrote ${path.join(values.out, `${name}.md`)} and .json`)
  return runs.some((r) => r.error) ? 1 : 0
}

try {
  process.exitCode = await main(process.argv.slice(2))
} catch (err) {
  if (err instanceof UsageError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
    process.stderr.write(`client-ceiling: ${(err as Error).message}\n\n${USAGE}`)
    process.exitCode = 2
  } else {
    process.stderr.write(`client-ceiling: ${err instanceof Error ? err.stack : String(err)}\n`)
    process.exitCode = 1
  }
}
