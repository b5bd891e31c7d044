/**
 * Extra local addresses for a control plane with several API servers.
 *
 * Every kube-apiserver publishes its `--advertise-address` in the `default/kubernetes`
 * Endpoints and EndpointSlice, except a loopback one (127/8 and ::1 are refused there), so
 * servers on 127.0.0.1 never show up. Instead, each control plane with several servers
 * claims a /24 of the benchmarking range 198.18.0.0/15 (RFC 2544, never routed) and adds
 * `198.18.R.1` ... `198.18.R.N` as /32s to the loopback interface OF THE HARNESS'S NETWORK
 * NAMESPACE this process runs in (netns.ts): never the host's, which claiming and releasing
 * refuse to touch. They exist, and are reachable, only in there, and vanish with it.
 *
 * Claiming is atomic: `ip addr add` of an address that exists fails, so two control planes
 * of one namespace never share a /24. The addresses carry the label `lo:crdm<pid>` (the
 * owner's pid) so `ip addr show dev lo` says whose they are.
 */
import { execFile, spawnSync } from 'node:child_process'
import { currentNetworkNamespace } from './netns.js'

/** First two octets of every claimed address. */
export const LOOPBACK_PREFIX = '198.18'
/** How many random /24s are tried before giving up. */
const ATTEMPTS = 32

interface IpResult {
  ok: boolean
  output: string
}

function ip(args: string[]): Promise<IpResult> {
  return new Promise((resolve) => {
    execFile('ip', args, { timeout: 10_000 }, (err, stdout, stderr) => {
      const output = `${stdout}${stderr}`.trim()
      if (!err) resolve({ ok: true, output })
      else resolve({ ok: false, output: output || err.message })
    })
  })
}

/** The label `ip addr add ... label` gives our addresses (at most 15 characters, `lo:` first). */
export function loopbackLabel(pid = process.pid): string {
  return `lo:crdm${pid}`.slice(0, 15)
}

/** IPv4 addresses on the loopback interface (`ip -j -4 addr show dev lo`). */
export async function loopbackIpv4Addresses(): Promise<string[]> {
  const res = await ip(['-j', '-4', 'addr', 'show', 'dev', 'lo'])
  if (!res.ok) throw new Error(`ip -j -4 addr show dev lo failed: ${res.output}`)
  const links = JSON.parse(res.output || '[]') as Array<{ addr_info?: Array<{ local?: string }> }>
  return links.flatMap((l) => (l.addr_info ?? []).map((a) => a.local).filter((a): a is string => typeof a === 'string'))
}

/**
 * Add `198.18.R.1` ... `198.18.R.<count>` (/32) to `lo` for a random free R, and return them
 * in order. Fails with a message naming the requirement when `ip addr add` is refused.
 */
export async function claimLoopbackAddresses(count: number): Promise<string[]> {
  if (!Number.isInteger(count) || count < 1 || count > 254) throw new Error(`cannot claim ${count} loopback addresses (1 to 254)`)
  assertInNetworkNamespace('add addresses to')
  let existing: string[]
  try {
    existing = await loopbackIpv4Addresses()
  } catch (err) {
    throw new Error(`several API servers need the ip command (iproute2) and CAP_NET_ADMIN: ${(err as Error).message}`, { cause: err })
  }
  const taken = new Set(existing.filter((a) => a.startsWith(`${LOOPBACK_PREFIX}.`)).map((a) => Number(a.split('.')[2])))
  const label = loopbackLabel()
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    const free = Array.from({ length: 254 }, (_, i) => i + 1).filter((r) => !taken.has(r))
    if (free.length === 0) break
    const third = free[Math.floor(Math.random() * free.length)]!
    const added: string[] = []
    let collided = false
    for (let i = 1; i <= count; i++) {
      const address = `${LOOPBACK_PREFIX}.${third}.${i}`
      const res = await ip(['addr', 'add', `${address}/32`, 'dev', 'lo', 'label', label])
      if (res.ok) {
        added.push(address)
        continue
      }
      await releaseLoopbackAddresses(added)
      if (/already assigned|File exists/i.test(res.output)) {
        // Someone else (another control plane, or a leak) has it: try another /24.
        collided = true
        break
      }
      throw new Error(
        `\`ip addr add ${address}/32 dev lo\` failed: ${res.output}. Several API servers (apiservers > 1) need CAP_NET_ADMIN ` +
          '(e.g. root) to add non-loopback addresses to the loopback interface of their network namespace: the API server refuses 127.0.0.0/8 in the ' +
          'default/kubernetes EndpointSlice. Run as root, or start a single API server (apiservers: 1).',
      )
    }
    if (!collided) return added
    taken.add(third)
  }
  throw new Error(`no free /24 in ${LOOPBACK_PREFIX}.0.0/16 on lo after ${ATTEMPTS} attempts (see \`ip -4 addr show dev lo\`)`)
}

/** Remove the addresses from the namespace's `lo` (missing ones are fine). */
export async function releaseLoopbackAddresses(addresses: readonly string[]): Promise<void> {
  if (addresses.length === 0) return
  assertInNetworkNamespace('delete addresses from')
  await Promise.all(addresses.map((a) => ip(['addr', 'del', `${a}/32`, 'dev', 'lo'])))
}

/** The one guard between these `ip addr` calls and the host's loopback interface. */
function assertInNetworkNamespace(what: string): void {
  if (currentNetworkNamespace() === undefined) {
    throw new Error(
      `refusing to ${what} the loopback interface outside a network namespace of the harness (the host's network ` +
        'configuration is never changed): several API servers run in one, see runInNetworkNamespace() in dev/controlplane/netns.ts',
    )
  }
}

/** Whether this process may give a child its own UTS namespace (`unshare --uts`, CAP_SYS_ADMIN). */
export function utsNamespacesWork(): { ok: boolean; output: string } {
  const r = spawnSync('unshare', ['--uts', 'sh', '-c', 'hostname crd-migrator-probe && hostname'], { encoding: 'utf8', timeout: 10_000 })
  const output = `${r.stdout ?? ''}${r.stderr ?? ''}${r.error ? r.error.message : ''}`.trim()
  return { ok: r.status === 0 && output === 'crd-migrator-probe', output }
}
