/**
 * Network namespaces of the harness, so that several API servers can have addresses of their
 * own without the host's network configuration ever changing.
 *
 * Every kube-apiserver publishes its address in the `default/kubernetes` EndpointSlice,
 * except a loopback one, so several servers each need a non-loopback address, and the
 * migrator under test dials the addresses it reads there. Those addresses live on the `lo`
 * of a network namespace the harness creates (`ip netns add crdm-<pid>-<hex>`, see
 * loopback.ts), never on the host's. Whoever talks to the servers has to be in that
 * namespace too, and a running Node process cannot change its network namespace, so the
 * process runs itself again inside it:
 *
 *   const name = await runInNetworkNamespace()   // the first statement of a CLI or test file
 *
 * Outside a harness namespace this creates one, runs the same Node with the same flags and
 * arguments in it (`nsenter --net=/run/netns/<name>`, stdio inherited, the IPC channel to a
 * parent such as tap relayed both ways, SIGINT/SIGTERM/SIGHUP/SIGALRM forwarded), and when
 * that copy ends removes the namespace and exits with its status: the promise never resolves
 * there. Inside (the copy, or anything it spawns) it resolves with the namespace's name at
 * once. Everything started in there (etcd, the API servers, a webhook, the CLI under test)
 * is in the namespace with it, reached on the namespace's own loopback; the host's
 * interfaces, addresses and routes are untouched (test/integration/network-namespace.test.ts).
 *
 * Removal: on the normal path after the copy exits (what still runs in the namespace gets a
 * few seconds to finish its own cleanup, then SIGKILL), at process exit (process.ts, layer
 * 1), and when this process is killed outright by the guard of process.ts (layer 3), which
 * terminates the copy, waits for the namespace to empty, and deletes it.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { constants, tmpdir } from 'node:os'
import { join } from 'node:path'
import { releaseDirAtExit, releaseNetworkNamespaceAtExit, removeDirAtExit, removeNetworkNamespaceAtExit, startGuard } from './process.js'
import { poll } from '../wait.js'

/** Set in the copy's environment: the name of the namespace it was started in. */
export const NETNS_ENV = 'CRD_MIGRATOR_NETNS'
/** Every harness namespace's name starts so: `crdm-<pid>-<4 hex>`. */
export const NETNS_PREFIX = 'crdm-'
/** Where `ip netns add` keeps them. */
const NETNS_DIR = '/run/netns'

export function netnsPath(name: string): string {
  return join(NETNS_DIR, name)
}

interface CmdResult {
  ok: boolean
  output: string
}

function run(cmd: string, args: string[]): Promise<CmdResult> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: 10_000 }, (err, stdout, stderr) => {
      const output = `${stdout}${stderr}`.trim()
      resolve(err ? { ok: false, output: output || err.message } : { ok: true, output })
    })
  })
}

function sameFile(a: string, b: string): boolean {
  try {
    const sa = statSync(a)
    const sb = statSync(b)
    return sa.ino === sb.ino && sa.dev === sb.dev
  } catch {
    return false
  }
}

/**
 * The harness namespace this process runs in: the name in {@link NETNS_ENV} when
 * `/proc/self/ns/net` is that namespace, else undefined (the host's, or any other: an
 * inherited variable alone proves nothing).
 */
export function currentNetworkNamespace(): string | undefined {
  const name = process.env[NETNS_ENV]
  if (!name || !name.startsWith(NETNS_PREFIX) || name.includes('/')) return undefined
  return sameFile('/proc/self/ns/net', netnsPath(name)) ? name : undefined
}

/** Names of the network namespaces `ip netns` knows (`ip -j netns list`). */
export async function listNetworkNamespaces(): Promise<string[]> {
  const res = await run('ip', ['-j', 'netns', 'list'])
  if (!res.ok) throw new Error(`ip -j netns list failed: ${res.output}`)
  return (JSON.parse(res.output || '[]') as Array<{ name: string }>).map((n) => n.name)
}

/** Pids of the processes in namespace `name` (`ip netns pids`); empty when it is gone. */
export async function networkNamespacePids(name: string): Promise<number[]> {
  const res = await run('ip', ['netns', 'pids', name])
  if (!res.ok) return []
  return res.output
    .split(/\s+/)
    .filter((p) => /^\d+$/.test(p))
    .map(Number)
}

/**
 * `ip netns add crdm-<pid>-<hex>` (a fresh name: another process's namespace is never
 * reused) with `lo` up, removed at process exit unless {@link deleteNetworkNamespace}d
 * first. Needs CAP_SYS_ADMIN (root).
 */
export async function createNetworkNamespace(): Promise<string> {
  for (let attempt = 0; attempt < 8; attempt++) {
    const name = `${NETNS_PREFIX}${process.pid}-${randomBytes(2).toString('hex')}`
    const added = await run('ip', ['netns', 'add', name])
    if (!added.ok) {
      if (/exists/i.test(added.output)) continue
      throw new Error(
        `\`ip netns add ${name}\` failed: ${added.output}. Several API servers run in a network namespace of their own ` +
          '(so that the host keeps its addresses), which needs CAP_SYS_ADMIN (e.g. root) and the ip command (iproute2); ' +
          'or start a single API server (apiservers: 1).',
      )
    }
    removeNetworkNamespaceAtExit(name)
    const up = await run('ip', ['-n', name, 'link', 'set', 'lo', 'up'])
    if (!up.ok) {
      await deleteNetworkNamespace(name)
      throw new Error(`\`ip -n ${name} link set lo up\` failed: ${up.output}`)
    }
    return name
  }
  throw new Error(`no free network namespace name for pid ${process.pid} after 8 attempts (see \`ip netns list\`)`)
}

/** `ip netns del` (a missing one is fine). Processes still inside keep it alive, nameless, until they exit. */
export async function deleteNetworkNamespace(name: string): Promise<void> {
  await run('ip', ['netns', 'del', name])
  releaseNetworkNamespaceAtExit(name)
}

/**
 * Wait (at most `graceMs`) for the processes in the namespace to end (the guards of the
 * control planes inside need about 3 s after a crash to stop theirs and remove their temp
 * dirs), SIGKILL what is left, delete it.
 */
async function drainAndDelete(name: string, graceMs: number): Promise<void> {
  let pids: number[] = []
  await poll(graceMs, async () => {
    pids = await networkNamespacePids(name)
    return pids.length === 0 || undefined
  })
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {
      // gone meanwhile
    }
  }
  await deleteNetworkNamespace(name)
}

export interface RunInNetworkNamespaceOptions {
  /**
   * Outside only, before the namespace is made: what needs the host's network (building the
   * control-plane binaries downloads Go modules; the namespace has only its own loopback).
   */
  prepare?: () => Promise<unknown>
  /** Outside only, right before the copy starts (tests: silence tap's timer in this process). */
  beforeSpawn?: () => void
  /** Progress messages (outside); default: silent. */
  log?: (msg: string) => void
}

const FORWARDED = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGALRM'] as const

/**
 * Inside a harness namespace: its name. Outside: run this process again inside a fresh one
 * (see the file comment) and exit with its status; never resolves. Only at the top of a
 * process's own code: the copy runs `process.argv` from the start.
 */
export async function runInNetworkNamespace(opts: RunInNetworkNamespaceOptions = {}): Promise<string> {
  const inside = currentNetworkNamespace()
  if (inside) return inside
  const log = opts.log ?? (() => {})

  // Ours before the exit hooks of process.ts are installed (by removeDirAtExit below): they
  // leave a signal alone when someone handles it, and here the copy decides.
  const copyOf: { process?: ChildProcess } = {}
  let signalledBeforeSpawn: NodeJS.Signals | undefined
  for (const sig of FORWARDED) {
    process.on(sig, () => {
      const child = copyOf.process
      if (child && child.exitCode === null && child.signalCode === null) child.kill(sig)
      else signalledBeforeSpawn ??= sig
    })
  }

  await opts.prepare?.()
  const name = await createNetworkNamespace()
  // For the guard: the namespace to delete, and (below) the copy's pid to terminate first.
  const dir = mkdtempSync(join(tmpdir(), 'crd-migrator-netns-'))
  removeDirAtExit(dir)
  mkdirSync(join(dir, 'run'))
  writeFileSync(join(dir, 'run', 'netns'), `${name}\n`)
  const guard = startGuard(dir)
  const finish = async (code: number): Promise<never> => {
    await drainAndDelete(name, 10_000)
    guard.disarm()
    rmSync(dir, { recursive: true, force: true })
    releaseDirAtExit(dir)
    process.exit(code)
  }
  if (signalledBeforeSpawn) return finish(128 + constants.signals[signalledBeforeSpawn])

  opts.beforeSpawn?.()
  log(`running ${process.argv.slice(1).join(' ')} in network namespace ${name}`)
  const ipc = typeof process.send === 'function'
  const copy = spawn('nsenter', [`--net=${netnsPath(name)}`, '--', process.execPath, ...process.execArgv, ...process.argv.slice(1)], {
    stdio: ipc ? ['inherit', 'inherit', 'inherit', 'ipc'] : 'inherit',
    // Its own process group: a terminal's Ctrl-C reaches it once, forwarded by us.
    detached: true,
    env: { ...process.env, [NETNS_ENV]: name },
  })
  copyOf.process = copy
  // nsenter execs Node in place, so this pid is the copy's own.
  if (copy.pid !== undefined) writeFileSync(join(dir, 'run', 'copy.pid'), String(copy.pid))
  process.on('exit', () => {
    if (copy.exitCode === null && copy.signalCode === null) copy.kill('SIGKILL')
  })
  if (ipc) {
    process.on('message', (m) => {
      if (copy.connected) copy.send(m as never)
    })
    copy.on('message', (m) => {
      if (process.connected) process.send?.(m)
    })
  }
  const exit = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    copy.once('error', (err) => {
      process.stderr.write(`crd-migrator devenv: cannot run nsenter (util-linux): ${err.message}\n`)
      resolve({ code: 1, signal: null })
    })
    copy.once('exit', (code, signal) => resolve({ code, signal }))
  })
  return finish(exit.signal ? 128 + constants.signals[exit.signal] : (exit.code ?? 1))
}
