/**
 * A pod's sandbox and its containers' processes, without a container runtime.
 *
 * Each container runs as
 *
 *   nsenter --net=/run/netns/<pod netns> -- unshare --mount --uts --propagation private -- /bin/sh <start.sh>
 *
 * where start.sh (written per start, quoted here; nothing of it reaches the host's mounts):
 *  1. mounts a tmpfs as the container's root, and one for the writable layers;
 *  2. shows the base system: the host's /usr, /etc (and /bin, /lib... when they are
 *     directories; copied when symlinks) each as an overlay whose upper layer is on that
 *     tmpfs, so writes (mkdir of a mountPath under /etc) stay in the container and are gone
 *     when it restarts, as a container's writable layer;
 *  3. bind-mounts the image contents read-only (image.ts: /nodejs, /app/...), a fresh /proc,
 *     a read-only /sys, a /dev of null, zero, full, random, urandom, tty, shm;
 *  4. bind-mounts the volumes (volumes.ts) at their mountPaths (parents first; subPath;
 *     readOnly; secret, configMap, downwardAPI and projected volumes always read-only) and
 *     the pod's /etc/hosts, /etc/hostname, /etc/resolv.conf;
 *  5. sets the hostname (the pod's name), makes the root read-only for
 *     readOnlyRootFilesystem, and touches `<container dir>/started`;
 *  6. `exec chroot <root> setpriv --reuid --regid --groups|--clear-groups --inh-caps=-all
 *     --bounding-set=-all [--no-new-privs] -- env -i -C <workingDir> <env> -- <command>`:
 *     every exec in place, so the pid spawned is the container's process, which gets the
 *     container's environment only, no capability (also as uid 0), and the pod's user.
 *
 * No user is created: uid and gid are numbers. Not done: PID and IPC namespaces, cgroups
 * (resources are not limited), seccomp profiles, AppArmor/SELinux.
 *
 * Cleanup: each process is a ManagedProcess (dev/controlplane/process.ts: SIGKILLed at
 * exit) with its pid file in `<pod dir>/run`, and each pod has a guard (startGuard) that,
 * should the agent die, however, terminates those pids, deletes the pod's network
 * namespace (`<pod dir>/run/netns`) and removes the pod directory (volumes included).
 */
import { execFile } from 'node:child_process'
import { existsSync, lstatSync, readlinkSync, statSync } from 'node:fs'
import { mkdir, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ManagedProcess, releaseDirAtExit, removeDirAtExit, startGuard, tailFile, type Guard } from '../controlplane/process.js'
import type { ImageLayer } from './image.js'

export const sq = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`

export interface SandboxMount {
  /** Host path (a directory, or a file with subPath). */
  source: string
  mountPath: string
  readOnly: boolean
}

export interface ContainerLaunch {
  name: string
  hostname: string
  command: string[]
  env: Map<string, string>
  workingDir: string
  uid: number
  gid: number
  groups: number[]
  noNewPrivs: boolean
  readOnlyRootFilesystem: boolean
  layers: ImageLayer[]
  mounts: SandboxMount[]
}

/** Top-level entries of the host's root shown to containers (see the file comment). */
const BASE = ['usr', 'etc', 'bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32']
const DEVICES = ['null', 'zero', 'full', 'random', 'urandom', 'tty']

/** The script of the file comment, for a container rooted at `root` with writable layers on `layersDir`. */
export function startScript(c: ContainerLaunch, root: string, layersDir: string, startedFile: string): string {
  const R = sq(root)
  const W = sq(layersDir)
  const lines = ['set -eu', `mount -t tmpfs -o mode=755,size=512m crdm-root ${R}`, `mount -t tmpfs -o mode=700,size=512m crdm-layers ${W}`]
  const overlays: string[] = []
  for (const name of BASE) {
    const host = `/${name}`
    if (!existsSync(host)) continue
    const st = lstatSync(host)
    if (st.isSymbolicLink()) lines.push(`ln -s ${sq(readlinkSync(host))} ${sq(`${root}/${name}`)}`)
    else if (st.isDirectory()) {
      lines.push(
        `mkdir ${sq(`${root}/${name}`)} ${sq(`${layersDir}/${name}.up`)} ${sq(`${layersDir}/${name}.work`)}`,
        `mount -t overlay crdm-${name} -o ${sq(`lowerdir=${host},upperdir=${layersDir}/${name}.up,workdir=${layersDir}/${name}.work`)} ${sq(`${root}/${name}`)}`,
      )
      overlays.push(`${root}/${name}`)
    }
  }
  const bind = (source: string, target: string, readOnly: boolean): void => {
    const t = sq(`${root}${target}`)
    const isDir = statSync(source, { throwIfNoEntry: false })?.isDirectory() ?? true
    lines.push(isDir ? `mkdir -p ${t}` : `mkdir -p "$(dirname ${t})" && touch ${t}`, `mount --bind ${sq(source)} ${t}`)
    if (readOnly) lines.push(`mount -o remount,bind,ro ${t}`)
  }
  lines.push(
    `mkdir -p ${sq(`${root}/proc`)} ${sq(`${root}/sys`)} ${sq(`${root}/dev`)} ${sq(`${root}/tmp`)} ${sq(`${root}/run`)} ${sq(`${root}/var`)}`,
    `ln -s ../run ${sq(`${root}/var/run`)}`,
    `chmod 1777 ${sq(`${root}/tmp`)}`,
    `mkdir -p ${sq(`${root}/home/nonroot`)} && chown ${c.uid}:${c.gid} ${sq(`${root}/home/nonroot`)}`,
  )
  for (const l of c.layers) bind(l.source, l.target, true)
  lines.push(
    `mount -t proc proc ${sq(`${root}/proc`)}`,
    `mount -t sysfs -o ro sysfs ${sq(`${root}/sys`)}`,
    `mount -t tmpfs -o mode=755,size=1m crdm-dev ${sq(`${root}/dev`)}`,
    ...DEVICES.map((d) => `touch ${sq(`${root}/dev/${d}`)} && mount --bind /dev/${d} ${sq(`${root}/dev/${d}`)}`),
    `mkdir ${sq(`${root}/dev/shm`)} && mount -t tmpfs -o mode=1777,size=64m shm ${sq(`${root}/dev/shm`)}`,
    `ln -s /proc/self/fd ${sq(`${root}/dev/fd`)}`,
    ...['stdin', 'stdout', 'stderr'].map((n, i) => `ln -s /proc/self/fd/${i} ${sq(`${root}/dev/${n}`)}`),
  )
  const depth = (p: string): number => p.split('/').filter(Boolean).length
  for (const m of [...c.mounts].sort((a, b) => depth(a.mountPath) - depth(b.mountPath))) bind(m.source, m.mountPath, m.readOnly)
  lines.push(`mkdir -p ${sq(`${root}${c.workingDir}`)}`, `printf '%s' ${sq(c.hostname)} > /proc/sys/kernel/hostname`)
  if (c.readOnlyRootFilesystem) {
    for (const o of overlays) lines.push(`mount -o remount,ro ${sq(o)}`)
    lines.push(`mount -o remount,ro ${R}`)
  }
  lines.push(`touch ${sq(startedFile)}`)
  const groups = c.groups.length > 0 ? `--groups=${c.groups.join(',')}` : '--clear-groups'
  const setpriv = [
    '/usr/bin/setpriv',
    `--reuid=${c.uid}`,
    `--regid=${c.gid}`,
    groups,
    '--inh-caps=-all',
    '--bounding-set=-all',
    ...(c.noNewPrivs ? ['--no-new-privs'] : []),
    '--',
  ]
  const env = [...c.env].map(([k, v]) => sq(`${k}=${v}`))
  lines.push(
    [`exec /usr/sbin/chroot ${R}`, ...setpriv, '/usr/bin/env', '-i', '-C', sq(c.workingDir), '--', ...env, ...c.command.map(sq)].join(' '),
  )
  return `${lines.join('\n')}\n`
}

export interface RunningContainer {
  process: ManagedProcess
  startedAt: Date
  /** Whether start.sh got as far as the exec (else the exit is a StartError). */
  reachedExec(): boolean
  logFile: string
}

export class PodSandbox {
  private readonly guard: Guard
  private readonly containers = new Map<string, RunningContainer>()

  private constructor(
    readonly dir: string,
    readonly netnsPath: string,
  ) {
    this.guard = startGuard(dir)
  }

  /** `<dir>` (0700) with run/netns naming the pod's network namespace, guarded (see the file comment). */
  static async create(dir: string, netns: string, netnsPath: string): Promise<PodSandbox> {
    await mkdir(join(dir, 'run'), { recursive: true, mode: 0o700 })
    await writeFile(join(dir, 'run', 'netns'), `${netns}\n`)
    removeDirAtExit(dir)
    return new PodSandbox(dir, netnsPath)
  }

  async start(c: ContainerLaunch): Promise<RunningContainer> {
    const cdir = join(this.dir, 'containers', c.name)
    const root = join(cdir, 'rootfs')
    const layers = join(cdir, 'layers')
    const started = join(cdir, 'started')
    await mkdir(root, { recursive: true, mode: 0o755 })
    await mkdir(layers, { recursive: true, mode: 0o700 })
    await rm(started, { force: true })
    const script = join(cdir, 'start.sh')
    await writeFile(script, startScript(c, root, layers, started), { mode: 0o700 })
    const logFile = join(this.dir, 'containers', `${c.name}.log`)
    const proc = ManagedProcess.start({
      name: c.name,
      command: 'nsenter',
      args: [`--net=${this.netnsPath}`, '--', 'unshare', '--mount', '--uts', '--propagation', 'private', '--', '/bin/sh', script],
      logFile,
      pidFile: join(this.dir, 'run', `${c.name}.pid`),
      env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
    })
    const running: RunningContainer = { process: proc, startedAt: new Date(), reachedExec: () => existsSync(started), logFile }
    this.containers.set(c.name, running)
    return running
  }

  /** Last lines of a container's log. */
  logs(name: string, lines = 20): string {
    return tailFile(join(this.dir, 'containers', `${name}.log`), lines)
  }

  /**
   * An exec probe: `command` in the container's namespaces, root and working directory, as
   * its user, with its environment; resolves with the exit code (-1 on timeout).
   */
  exec(name: string, launch: ContainerLaunch, command: string[], timeoutMs: number): Promise<number> {
    const pid = this.containers.get(name)?.process.child.pid
    if (pid === undefined) return Promise.resolve(-1)
    const args = ['-t', String(pid), '--net', '--mount', '--uts', '--root', '--wd', '--', '/usr/bin/setpriv', `--reuid=${launch.uid}`]
    args.push(`--regid=${launch.gid}`, '--clear-groups', '--inh-caps=-all', '--', '/usr/bin/env', '-i', '--')
    args.push(...[...launch.env].map(([k, v]) => `${k}=${v}`), ...command)
    return new Promise((resolve) => {
      execFile('nsenter', args, { timeout: timeoutMs }, (err) => {
        if (!err) resolve(0)
        else resolve(err.killed ? -1 : typeof err.code === 'number' ? err.code : 1)
      })
    })
  }

  /** SIGTERM every container, SIGKILL after `graceMs`; then the guard is disarmed and the directory removed. */
  async destroy(graceMs: number): Promise<void> {
    await Promise.all([...this.containers.values()].map((c) => c.process.stop(graceMs)))
    this.guard.disarm()
    await rm(this.dir, { recursive: true, force: true })
    releaseDirAtExit(this.dir)
  }
}
