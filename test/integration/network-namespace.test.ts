/**
 * Several API servers never change the host's network configuration: they, their addresses
 * and etcd live in a network namespace the harness makes (dev/controlplane/netns.ts) and
 * removes when it stops, is killed, or its copy inside crashes. This file runs in the
 * host's namespace and watches `npm run cluster -- --apiservers 3` (dev/main.ts, from
 * source) from outside: `ip -j addr` and `ip -j route` of the host are the same before,
 * during and after, and the namespace and every process in it are gone at the end.
 */
import { execFileSync, spawn, type ChildProcessByStdio } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import type { Readable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { attachControlPlane, ensureBinaries, startControlPlane } from '../../dev/controlplane/controlplane.js'
import { claimLoopbackAddresses } from '../../dev/controlplane/loopback.js'
import { currentNetworkNamespace, listNetworkNamespaces, networkNamespacePids, NETNS_PREFIX } from '../../dev/controlplane/netns.js'
import { until } from '../helpers/until.js'

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..')

/** The host's addresses and routes (every table, both families), without the counting-down lifetimes. */
function hostNetwork(): unknown {
  const ip = (...args: string[]): unknown => JSON.parse(execFileSync('ip', ['-j', ...args], { encoding: 'utf8' }) || '[]')
  const text = JSON.stringify(
    { addr: ip('addr'), route: ip('route', 'show', 'table', 'all'), route6: ip('-6', 'route', 'show', 'table', 'all') },
    (k, v: unknown) => (['valid_life_time', 'preferred_life_time', 'expires'].includes(k) ? undefined : v),
  )
  return JSON.parse(text)
}

/** Runs and is not a zombie (an orphan's zombie may wait for a reaper that never comes, in a container). */
function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'))
  } catch {
    return false
  }
}

function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ')
  } catch {
    return ''
  }
}

interface Cluster {
  child: ChildProcessByStdio<null, Readable, Readable>
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
  netns: string
  servers: string[]
  kubeconfig: string
  /** Every process in the namespace once it was ready (etcd, the API servers, the copy, their guards). */
  pids: number[]
}

/** `npm run cluster -- --apiservers 3`, through tap's TypeScript loader; resolves once it printed how to reach it. */
async function startCluster(t: Test): Promise<Cluster> {
  const child = spawn(process.execPath, [...process.execArgv, join(root, 'dev', 'main.ts'), 'cluster', '--apiservers', '3'], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
  })
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  )
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d))
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d))
  await Promise.race([
    until(
      'npm run cluster to print the servers',
      180_000,
      async () => ({ ready: /^# logs:/m.test(stdout), stdout, stderr: stderr.slice(-3000) }),
      (out) => out.ready,
    ),
    exited.then(({ code, signal }) => {
      throw new Error(`npm run cluster exited (${signal ?? code}) before it was ready:\n${stdout}\n${stderr.slice(-3000)}`)
    }),
  ])
  const netns = /^# network namespace (\S+):/m.exec(stdout)?.[1]
  const kubeconfig = /^export KUBECONFIG=(\S+)$/m.exec(stdout)?.[1]
  const servers = [...stdout.matchAll(/^#\s+\d+: https:\/\/([\d.]+):\d+ /gm)].map((m) => m[1]!)
  if (!netns || !kubeconfig) throw new Error(`unexpected output of npm run cluster:\n${stdout}`)
  return { child, exited, netns, servers, kubeconfig, pids: await networkNamespacePids(netns) }
}

/** After the end, however it came: the namespace, its processes and the control plane's temp dir are gone. */
async function leavesNothing(t: Test, cluster: Cluster, before: unknown): Promise<void> {
  await until(
    `namespace ${cluster.netns} and its processes to be gone`,
    30_000,
    async () => ({ namespaces: await listNetworkNamespaces(), alive: cluster.pids.filter(alive) }),
    (now) => !now.namespaces.includes(cluster.netns) && now.alive.length === 0,
  )
  t.notOk((await listNetworkNamespaces()).includes(cluster.netns), `namespace ${cluster.netns} is gone`)
  t.same(cluster.pids.filter(alive), [], `none of its ${cluster.pids.length} processes runs`)
  t.notOk(existsSync(dirname(cluster.kubeconfig)), "the control plane's temp dir is removed")
  t.same(hostNetwork(), before, "the host's addresses and routes are as before")
}

t.test('outside a namespace of the harness: several API servers are refused, and nothing is added to lo', async (t) => {
  t.equal(currentNetworkNamespace(), undefined, "this file runs in the host's namespace")
  const before = hostNetwork()
  await t.rejects(startControlPlane({ apiservers: 2 }), /network namespace of the harness/)
  await t.rejects(claimLoopbackAddresses(2), /refusing to add addresses to the loopback interface outside a network namespace/)
  t.same(hostNetwork(), before, "the host's addresses and routes are untouched")
})

t.test("a control plane in a namespace is not attached from the host's", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'crd-migrator-state-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const state = join(dir, 'state.json')
  await writeFile(state, JSON.stringify({ version: 1, networkNamespace: `${NETNS_PREFIX}1-abcd`, server: 'https://198.18.1.1:6443' }))
  await t.rejects(attachControlPlane(state), /runs in network namespace crdm-1-abcd, unreachable from this process/)
})

t.test('npm run cluster -- --apiservers 3', async (t) => {
  // A cold build of the binaries takes many minutes; the command would do it too, first.
  t.setTimeout(60 * 60 * 1000)
  await ensureBinaries()
  t.setTimeout(10 * 60 * 1000)

  t.test('started and stopped (SIGTERM): the host never sees its addresses, and the namespace goes with it', async (t) => {
    const before = hostNetwork()
    const namespacesBefore = await listNetworkNamespaces()
    const cluster = await startCluster(t)
    t.match(cluster.netns, new RegExp(`^${NETNS_PREFIX}\\d+-[0-9a-f]{4}$`), `runs in namespace ${cluster.netns}`)
    t.notOk(namespacesBefore.includes(cluster.netns), 'a fresh one')
    t.equal(cluster.servers.length, 3)
    const inside = JSON.stringify(
      JSON.parse(execFileSync('ip', ['-n', cluster.netns, '-j', 'addr', 'show', 'dev', 'lo'], { encoding: 'utf8' })),
    )
    for (const a of cluster.servers) t.ok(inside.includes(`"local":"${a}"`), `${a} is on the namespace's lo`)
    const commands = cluster.pids.map(commandOf)
    t.equal(commands.filter((c) => /\/kube-apiserver /.test(c)).length, 3, 'the three API servers run in it')
    t.equal(commands.filter((c) => /\/etcd /.test(c)).length, 1, 'and etcd')
    t.same(hostNetwork(), before, "while it runs, the host's addresses and routes are as before")

    cluster.child.kill('SIGTERM')
    t.same(await cluster.exited, { code: 0, signal: null }, 'it stops cleanly')
    await leavesNothing(t, cluster, before)
  })

  t.test('killed outright (SIGKILL): the guard stops the copy inside and the servers, and deletes the namespace', async (t) => {
    const before = hostNetwork()
    const cluster = await startCluster(t)
    cluster.child.kill('SIGKILL')
    t.same(await cluster.exited, { code: null, signal: 'SIGKILL' }, 'it dies at once')
    await leavesNothing(t, cluster, before)
  })

  t.test('its copy inside crashes (SIGKILL): the namespace is removed and the failure passed on', async (t) => {
    const before = hostNetwork()
    const cluster = await startCluster(t)
    const copy = cluster.pids.find((p) => /main\.ts cluster --apiservers 3/.test(commandOf(p)))
    t.ok(copy, 'the command runs again inside the namespace')
    process.kill(copy!, 'SIGKILL')
    t.same(await cluster.exited, { code: 128 + 9, signal: null }, 'exit status 137, as the copy died of SIGKILL')
    await leavesNothing(t, cluster, before)
  })
})
