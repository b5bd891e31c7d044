/**
 * Pod networking of the node agent, inside a network namespace of the harness only
 * (dev/controlplane/netns.ts): the host's interfaces, addresses and routes are never touched.
 *
 *   harness netns (the API servers, etcd, the agent)        pod netns crdm-<pid>-p<n> (one per pod)
 *   ┌──────────────────────────────────────────────┐       ┌─────────────────────────────┐
 *   │ bridge crdmbr0  10.244.0.1/24 (the node's IP) │──veth─│ eth0 10.244.0.N/24          │
 *   │ lo 127.0.0.1, 198.18.R.i (several servers)   │       │ default via 10.244.0.1, lo  │
 *   └──────────────────────────────────────────────┘       └─────────────────────────────┘
 *
 * The pod range (default 10.244.0.0/24, the node's podCIDR) exists only in there: the API
 * server, the agent's probes and other pods reach a pod IP over the bridge, and a pod
 * reaches every address of the harness namespace (its own API server forwarder among them)
 * through the gateway, the bridge's address, which is also the Node's InternalIP. No
 * forwarding or NAT: nothing leaves the harness namespace.
 *
 * Every pod namespace is named `crdm-<agent pid>-p<hex>` and is deleted at exit (process.ts
 * layers 1 and 2) and by the pod's guard when the agent is killed (layer 3, see sandbox.ts).
 */
import { execFile } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { currentNetworkNamespace, NETNS_PREFIX, netnsPath } from '../controlplane/netns.js'
import { releaseNetworkNamespaceAtExit, removeNetworkNamespaceAtExit } from '../controlplane/process.js'

export function run(cmd: string, args: string[], timeoutMs = 10_000): Promise<{ ok: boolean; output: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: timeoutMs }, (err, stdout, stderr) => {
      const output = `${stdout}${stderr}`.trim()
      resolve(err ? { ok: false, output: output || err.message } : { ok: true, output })
    })
  })
}

async function ip(args: string[]): Promise<string> {
  const r = await run('ip', args)
  if (!r.ok) throw new Error(`ip ${args.join(' ')}: ${r.output}`)
  return r.output
}

export interface PodNetworkOptions {
  /** An IPv4 /24 as `a.b.c.0/24`; default 10.244.0.0/24. */
  podCIDR?: string
  /** The bridge's name in the harness namespace; default crdmbr0. */
  bridge?: string
}

export interface PodSandboxNetwork {
  /** `crdm-<pid>-p<hex>`, under /run/netns. */
  netns: string
  netnsPath: string
  ip: string
  /** The host end of the veth pair, in the harness namespace. */
  hostVeth: string
}

export class PodNetwork {
  readonly podCIDR: string
  readonly gateway: string
  readonly bridge: string
  private readonly prefix: string
  private readonly used = new Set<number>()
  private readonly sandboxes = new Map<string, PodSandboxNetwork>()
  private ready = false

  constructor(options: PodNetworkOptions = {}) {
    this.podCIDR = options.podCIDR ?? '10.244.0.0/24'
    const m = /^(\d+\.\d+\.\d+)\.0\/24$/.exec(this.podCIDR)
    if (!m) throw new Error(`podCIDR must be an IPv4 /24 (a.b.c.0/24), not ${this.podCIDR}`)
    this.prefix = m[1]!
    this.gateway = `${this.prefix}.1`
    this.bridge = options.bridge ?? 'crdmbr0'
  }

  /** The bridge with the gateway address, in the harness namespace this process runs in. */
  async setUp(): Promise<void> {
    if (currentNetworkNamespace() === undefined) {
      throw new Error(
        'the node agent gives pods addresses inside a network namespace of the harness only (the host keeps its network ' +
          'configuration): run it in one, `await runInNetworkNamespace()` from dev/controlplane/netns.ts first',
      )
    }
    await ip(['link', 'add', this.bridge, 'type', 'bridge'])
    await ip(['addr', 'add', `${this.gateway}/24`, 'dev', this.bridge])
    await ip(['link', 'set', this.bridge, 'up'])
    this.ready = true
  }

  /**
   * A free address and the names of a pod's namespace and veth, nothing made yet: the
   * caller records the namespace's name for its guard first (sandbox.ts), then
   * {@link createSandbox} makes it, so no moment exists where it could leak.
   */
  reserve(): PodSandboxNetwork {
    if (!this.ready) throw new Error('PodNetwork.setUp() first')
    const host = Array.from({ length: 253 }, (_, i) => i + 2).find((n) => !this.used.has(n))
    if (host === undefined) throw new Error(`no free address left in ${this.podCIDR}`)
    this.used.add(host)
    const hex = randomBytes(3).toString('hex')
    const netns = `${NETNS_PREFIX}${process.pid}-p${hex}`
    const sandbox: PodSandboxNetwork = { netns, netnsPath: netnsPath(netns), ip: `${this.prefix}.${host}`, hostVeth: `crdmv${hex}` }
    this.sandboxes.set(netns, sandbox)
    return sandbox
  }

  /** The reserved pod namespace with lo up and eth0 on the bridge at its address (removed again on failure). */
  async createSandbox(sandbox: PodSandboxNetwork): Promise<void> {
    try {
      await ip(['netns', 'add', sandbox.netns])
      removeNetworkNamespaceAtExit(sandbox.netns)
      await ip(['-n', sandbox.netns, 'link', 'set', 'lo', 'up'])
      await ip(['link', 'add', sandbox.hostVeth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', sandbox.netns])
      await ip(['link', 'set', sandbox.hostVeth, 'master', this.bridge])
      await ip(['link', 'set', sandbox.hostVeth, 'up'])
      await ip(['-n', sandbox.netns, 'addr', 'add', `${sandbox.ip}/24`, 'dev', 'eth0'])
      await ip(['-n', sandbox.netns, 'link', 'set', 'eth0', 'up'])
      await ip(['-n', sandbox.netns, 'route', 'add', 'default', 'via', this.gateway])
    } catch (err) {
      await this.deleteSandbox(sandbox)
      throw err
    }
  }

  /** The veth pair and the namespace (what still runs inside keeps it alive, nameless, until it exits); the address is free again. */
  async deleteSandbox(sandbox: PodSandboxNetwork): Promise<void> {
    if (this.sandboxes.get(sandbox.netns) !== sandbox) return // deleted already (its address may be another pod's now)
    await run('ip', ['link', 'del', sandbox.hostVeth])
    await run('ip', ['netns', 'del', sandbox.netns])
    releaseNetworkNamespaceAtExit(sandbox.netns)
    this.sandboxes.delete(sandbox.netns)
    this.used.delete(Number(sandbox.ip.split('.')[3]))
  }

  /** Every sandbox, then the bridge. */
  async tearDown(): Promise<void> {
    for (const s of [...this.sandboxes.values()]) await this.deleteSandbox(s)
    if (this.ready) await run('ip', ['link', 'del', this.bridge])
    this.ready = false
  }
}
