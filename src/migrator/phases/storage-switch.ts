/**
 * Waits until every API server stores the CRD in the new version. After a storage flip
 * each kube-apiserver switches when its own CRD informer sees the update; a server that
 * lags still writes the old version, after the rewrite has passed an object, and
 * storedVersions would then be narrowed over it. So, before rewriting and again before
 * narrowing, every server listed in the `default/kubernetes` EndpointSlices (or in
 * --apiserver-endpoints) is asked, by address, whether its discovery serves the new
 * storageVersionHash; the run goes on once all agree and keep agreeing for the settle
 * time. Where the servers cannot be reached one by one (a managed control plane behind
 * one address), it says so once and checks the server it talks to, plus the settle time.
 * The CRDs of one group switched together share their discovery reads (discovery-cache.ts).
 */
import type { Logger } from 'pino'
import { CrdMigratorError, errorMessage } from '../../errors.js'
import { describeEndpoint, listApiServers } from '../../kube/apiservers.js'
import { storageVersionHash, waitForStorageVersion } from '../../kube/discovery.js'
import { sharedDiscovery } from '../../kube/discovery-cache.js'
import type { KubeHttp } from '../../kube/http.js'
import { connectionErrorCode } from '../../kube/connection-errors.js'

export type StorageSwitchMode = 'all-servers' | 'single-server'

export interface StorageSwitchReport {
  mode: StorageSwitchMode
  /** API servers listed (EndpointSlices or configuration). */
  listed: number
  /** API servers asked one by one (0 in single-server mode). */
  checked: number
  /** Why the servers were not asked one by one. */
  fallbackReason?: string
}

/**
 * How long every API server must have agreed on the new storage version before objects are
 * rewritten: the watch caches and storage of a server that just switched settle for a
 * moment (not a setting; tests pass their own).
 */
export const STORAGE_SETTLE_MS = 2_000

export interface StorageSwitchOptions {
  timeoutMs: number
  settleMs: number
  signal?: AbortSignal | undefined
  /** Servers to ask instead of the EndpointSlices' (URLs). */
  endpoints?: readonly string[] | undefined
  /** Each server gets this long to answer a discovery request. Default 2 s. */
  requestTimeoutMs?: number
  /** Told which servers it waits for, whenever that changes. */
  onWaiting?: (servers: string[]) => void
  logger: Logger
}

interface Crd {
  group: string
  plural: string
  kind: string
}

/** Connection failures that mean "this address cannot be reached from here", not "this server is slow". */
const UNREACHABLE =
  /^(ECONNREFUSED|EHOSTUNREACH|ENETUNREACH|ENOTFOUND|EAI_AGAIN|ERR_TLS_CERT_ALTNAME_INVALID|UNABLE_TO_VERIFY_LEAF_SIGNATURE|DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN|CERT_HAS_EXPIRED|ERR_SSL_WRONG_VERSION_NUMBER)$/

function isTimeout(err: unknown): boolean {
  return connectionErrorCode(err) === 'ETIMEDOUT'
}

/** The client wraps connection failures (CRDM_UNREACHABLE, CRDM_TLS): their errno or TLS code decides. */
function isUnreachable(err: unknown): boolean {
  const code = connectionErrorCode(err)
  return code !== undefined && UNREACHABLE.test(code)
}

export async function waitForStorageEverywhere(
  http: KubeHttp,
  crd: Crd,
  version: string,
  o: StorageSwitchOptions,
): Promise<StorageSwitchReport> {
  const want = storageVersionHash(crd.group, version, crd.kind)
  let servers: URL[]
  try {
    servers = o.endpoints?.length ? o.endpoints.map((e) => new URL(e)) : await listApiServers(http)
  } catch (err) {
    return single(http, crd, version, o, 0, `the API servers cannot be listed (${errorMessage(err)})`)
  }
  if (servers.length === 0) return single(http, crd, version, o, 0, 'no API server is listed in the default/kubernetes EndpointSlices')

  const clients = servers.map((url) => ({
    url,
    name: describeEndpoint(url),
    http: http.forEndpoint(url, { maxSockets: 2, defaultTimeoutMs: o.requestTimeoutMs ?? 2_000 }),
  }))
  try {
    const deadline = Date.now() + o.timeoutMs
    let agreedSince: number | undefined
    let waitingFor = ''
    for (let round = 0; ; round++) {
      o.signal?.throwIfAborted()
      const answers = await Promise.all(
        clients.map(async (c) => {
          try {
            return { c, hash: await sharedDiscovery.storageVersionHash(c.http, crd.group, version, crd.plural, want) }
          } catch (err) {
            return { c, err }
          }
        }),
      )
      // None answers at all: from here the servers cannot be reached one by one (refused,
      // or dropped by a firewall: timeouts). One that answers while another does not is a
      // lagging server, waited for.
      if (round === 0 && answers.every((a) => 'err' in a && (isUnreachable(a.err) || isTimeout(a.err)))) {
        const first = answers[0] as { c: { name: string }; err: unknown }
        return single(
          http,
          crd,
          version,
          o,
          servers.length,
          `the API servers cannot be reached one by one from here (${first.c.name}: ${errorMessage(first.err)})`,
        )
      }
      const lagging = answers.filter((a) => !('hash' in a) || a.hash !== want).map((a) => a.c.name)
      if (lagging.length === 0) {
        agreedSince ??= Date.now()
        if (Date.now() - agreedSince >= o.settleMs) return { mode: 'all-servers', listed: servers.length, checked: servers.length }
      } else {
        agreedSince = undefined
        if (lagging.join() !== waitingFor) {
          waitingFor = lagging.join()
          o.logger.info({ servers: lagging, storageVersion: version }, 'waiting for API servers to store the new version')
          o.onWaiting?.(lagging)
        }
        if (Date.now() > deadline) {
          throw new CrdMigratorError(
            'CRDM_STORAGE_NOT_SWITCHED',
            `API server(s) ${lagging.join(', ')} did not switch to storage version ${version} within ${Math.round(o.timeoutMs / 1000)}s (of ${servers.length} listed)`,
          )
        }
      }
      await new Promise((r) => setTimeout(r, Math.min(250, Math.max(50, o.settleMs / 4))))
    }
  } finally {
    for (const c of clients) c.http.close()
  }
}

/** Fallback reasons already said in this process: the warning comes once, later runs log it at debug. */
const said = new Set<string>()

async function single(
  http: KubeHttp,
  crd: Crd,
  version: string,
  o: StorageSwitchOptions,
  listed: number,
  reason: string,
): Promise<StorageSwitchReport> {
  const level = said.has(reason) ? 'debug' : 'warn'
  said.add(reason)
  o.logger[level]({ reason }, 'checking the storage version on one API server only (plus the settle time)')
  await waitForStorageVersion(http, crd, version, {
    timeoutMs: o.timeoutMs,
    settleMs: o.settleMs,
    ...(o.signal ? { signal: o.signal } : {}),
    served: (c, group, v, plural, want) => sharedDiscovery.storageVersionHash(c, group, v, plural, want),
  })
  return { mode: 'single-server', listed, checked: 0, fallbackReason: reason }
}
