/**
 * Child-process plumbing for the local control plane: log files, pid files, graceful stop,
 * pause (SIGSTOP) and resume, and three layers against leaked etcd / kube-apiserver
 * processes (and the network namespaces of netns.ts, where several API servers run):
 *  1. a process 'exit' hook that SIGKILLs every live child, removes the temp dirs and
 *     deletes the network namespaces
 *  2. SIGINT/SIGTERM/SIGHUP handlers doing the same, installed only when nobody else handles
 *     the signal (so we never swallow a signal that e.g. tap or a CLI wants to handle)
 *  3. a tiny detached `sh` guard per control plane (and per namespace) that blocks reading a
 *     pipe from us and, when this process dies in any way (even SIGKILL), terminates the pids
 *     recorded in the run directory, deletes the network namespace named in `run/netns` once
 *     nothing runs in it any more (SIGKILL to what still does after 5 s) and removes the temp dir.
 * The loopback addresses of several API servers need no cleanup of their own: they exist only
 * in such a namespace and go with it.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { closeSync, openSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs'
import type { Socket } from 'node:net'

export interface ProcessSpec {
  /** Short name used in messages ("etcd", "kube-apiserver"). */
  name: string
  command: string
  args: string[]
  /** stdout and stderr are appended here. */
  logFile: string
  /** Written with the child's pid while it runs (read by the guard). */
  pidFile?: string
  env?: NodeJS.ProcessEnv
}

export interface ExitInfo {
  code: number | null
  signal: NodeJS.Signals | null
}

const liveProcesses = new Set<ManagedProcess>()
const ownedDirs = new Set<string>()
const ownedNamespaces = new Set<string>()
let hooksInstalled = false

function cleanupSync(): void {
  for (const p of liveProcesses) p.killSync()
  // What still runs inside keeps a deleted namespace alive, nameless, until it exits.
  for (const n of ownedNamespaces) spawnSync('ip', ['netns', 'del', n], { stdio: 'ignore', timeout: 5_000 })
  ownedNamespaces.clear()
  for (const d of ownedDirs) {
    try {
      rmSync(d, { recursive: true, force: true })
    } catch {
      // best effort at exit
    }
  }
  ownedDirs.clear()
}

function installExitHooks(): void {
  if (hooksInstalled) return
  hooksInstalled = true
  process.on('exit', cleanupSync)
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    if (process.listenerCount(sig) > 0) continue // someone else decides what this signal does
    const onSignal = (): void => {
      cleanupSync()
      process.removeListener(sig, onSignal)
      // Nobody else handles it: die of the signal as we would have without our handler.
      if (process.listenerCount(sig) === 0) process.kill(process.pid, sig)
    }
    process.on(sig, onSignal)
  }
}

/** Remove `dir` at process exit unless it was released with {@link releaseDirAtExit}. */
export function removeDirAtExit(dir: string): void {
  installExitHooks()
  ownedDirs.add(dir)
}

export function releaseDirAtExit(dir: string): void {
  ownedDirs.delete(dir)
}

/** `ip netns del` this namespace at process exit unless released with {@link releaseNetworkNamespaceAtExit}. */
export function removeNetworkNamespaceAtExit(name: string): void {
  installExitHooks()
  ownedNamespaces.add(name)
}

export function releaseNetworkNamespaceAtExit(name: string): void {
  ownedNamespaces.delete(name)
}

export class ManagedProcess {
  readonly name: string
  readonly logFile: string
  readonly child: ChildProcess
  /** Resolves once the process has exited (never rejects). */
  readonly exited: Promise<ExitInfo>
  private exitInfo: ExitInfo | undefined
  private readonly pidFile: string | undefined
  private stoppedBySigstop = false

  private constructor(spec: ProcessSpec) {
    installExitHooks()
    this.name = spec.name
    this.logFile = spec.logFile
    this.pidFile = spec.pidFile
    const fd = openSync(spec.logFile, 'a')
    try {
      writeFileSync(fd, `\n==== ${new Date().toISOString()} ${spec.command} ${spec.args.join(' ')}\n`)
      // detached: own process group, so a terminal Ctrl-C reaches us (and we stop the children
      // in order) rather than every child at once.
      this.child = spawn(spec.command, spec.args, {
        stdio: ['ignore', fd, fd],
        detached: true,
        env: spec.env ?? process.env,
      })
    } finally {
      closeSync(fd)
    }
    // Never keep the event loop alive just because a child runs; the exit hooks stop it.
    this.child.unref()
    this.exited = new Promise<ExitInfo>((resolve) => {
      const done = (info: ExitInfo): void => {
        if (this.exitInfo) return
        this.exitInfo = info
        liveProcesses.delete(this)
        this.removePidFile()
        resolve(info)
      }
      this.child.once('exit', (code, signal) => done({ code, signal }))
      this.child.once('error', (err) => {
        try {
          writeFileSync(this.logFile, `\nspawn error: ${err.message}\n`, { flag: 'a' })
        } catch {
          // ignore
        }
        done({ code: -1, signal: null })
      })
    })
    liveProcesses.add(this)
    if (this.pidFile && this.child.pid !== undefined) writeFileSync(this.pidFile, String(this.child.pid))
  }

  static start(spec: ProcessSpec): ManagedProcess {
    return new ManagedProcess(spec)
  }

  get running(): boolean {
    return this.exitInfo === undefined
  }

  /** Exit status, once exited. */
  get exit(): ExitInfo | undefined {
    return this.exitInfo
  }

  /** Stopped with {@link pause} and not resumed yet. */
  get paused(): boolean {
    return this.running && this.stoppedBySigstop
  }

  /** SIGSTOP: the process keeps its sockets (connections are accepted by the kernel) but answers nothing. */
  pause(): void {
    if (!this.running) return
    this.signal('SIGSTOP')
    this.stoppedBySigstop = true
  }

  /** SIGCONT after {@link pause}. */
  resume(): void {
    if (!this.running) return
    this.signal('SIGCONT')
    this.stoppedBySigstop = false
  }

  /** SIGTERM, then SIGKILL after `graceMs`; resolves when the process is gone. */
  async stop(graceMs = 10_000): Promise<ExitInfo> {
    if (!this.running) return this.exitInfo!
    if (graceMs <= 0) {
      this.signal('SIGKILL')
      return this.exited
    }
    this.signal('SIGTERM')
    // A paused process only sees the SIGTERM once it runs again.
    if (this.stoppedBySigstop) this.resume()
    let timer: NodeJS.Timeout | undefined
    const killed = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        this.signal('SIGKILL')
        resolve()
      }, graceMs)
    })
    await Promise.race([this.exited, killed])
    clearTimeout(timer)
    return this.exited
  }

  /** Synchronous SIGKILL, for exit hooks. */
  killSync(): void {
    if (this.running) this.signal('SIGKILL')
    this.removePidFile()
  }

  signal(sig: NodeJS.Signals): void {
    if (!this.running) return
    try {
      this.child.kill(sig)
    } catch {
      // already gone
    }
  }

  /** Last `lines` lines of the log file. */
  tail(lines = 50): string {
    return tailFile(this.logFile, lines)
  }

  private removePidFile(): void {
    if (!this.pidFile) return
    try {
      unlinkSync(this.pidFile)
    } catch {
      // not there
    }
  }
}

export function tailFile(file: string, lines = 50): string {
  try {
    const text = readFileSync(file, 'utf8')
    const all = text.split('\n')
    if (all.at(-1) === '') all.pop()
    return all.slice(-lines).join('\n')
  } catch (err) {
    return `(no log: ${(err as Error).message})`
  }
}

const GUARD_SCRIPT = `
dir="$1"
while read -r _; do :; done
for sig in TERM KILL; do
  for f in "$dir"/run/*.pid; do
    [ -f "$f" ] && kill -"$sig" "$(cat "$f")" 2>/dev/null
    # a paused (SIGSTOPped) process sees SIGTERM only once continued
    [ -f "$f" ] && [ "$sig" = TERM ] && kill -CONT "$(cat "$f")" 2>/dev/null
  done
  [ "$sig" = TERM ] && sleep 3
done
if [ -f "$dir/run/netns" ]; then
  ns=$(cat "$dir/run/netns")
  # what runs in it (a control plane's processes, whose own guard needs ~3 s) ends first
  i=0
  while [ -n "$(ip netns pids "$ns" 2>/dev/null)" ] && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null
fi
rm -rf "$dir"
`

export interface Guard {
  /** Disarm: the caller cleans up itself. */
  disarm(): void
}

/**
 * Start the parent-death guard for `dir`: when this Node process dies (however), it
 * terminates the pids in `<dir>/run/*.pid`, deletes the network namespace named in
 * `<dir>/run/netns` (after what runs in it has ended, or been killed 5 s later) and removes `dir`.
 */
export function startGuard(dir: string): Guard {
  const guard = spawn('sh', ['-c', GUARD_SCRIPT, 'crd-migrator-devenv-guard', dir], {
    stdio: ['pipe', 'ignore', 'ignore'],
    detached: true,
  })
  guard.on('error', () => {
    // no sh: layers 1 and 2 still apply
  })
  guard.unref()
  const stdin = guard.stdin as Socket | null
  stdin?.unref()
  let armed = true
  return {
    disarm() {
      if (!armed) return
      armed = false
      try {
        guard.kill('SIGKILL')
      } catch {
        // gone
      }
      guard.stdin?.destroy()
    },
  }
}
