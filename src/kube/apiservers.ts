/** Every kube-apiserver publishes itself in `default/kubernetes`'s EndpointSlices, so each can be asked what it stores. */
import { isIP } from 'node:net'
import type { KubeHttp } from './http.js'
import { collectionPath } from './paths.js'

interface EndpointSlice {
  addressType?: string
  endpoints?: Array<{ addresses?: string[]; conditions?: { ready?: boolean } }>
  ports?: Array<{ name?: string; port?: number }>
}

export const APISERVER_SLICES = collectionPath({ group: 'discovery.k8s.io', version: 'v1', plural: 'endpointslices' }, 'default')

/** `https://<address>:<port>` of every ready endpoint of the slices, deduplicated, in order. */
export function endpointsFromSlices(slices: readonly EndpointSlice[]): URL[] {
  const seen = new Set<string>()
  const out: URL[] = []
  for (const slice of slices) {
    const port = slice.ports?.find((p) => p.name === 'https')?.port ?? (slice.ports?.length === 1 ? slice.ports[0]?.port : undefined)
    if (!port) continue
    for (const endpoint of slice.endpoints ?? []) {
      if (endpoint.conditions?.ready === false) continue
      for (const address of endpoint.addresses ?? []) {
        const host = isIP(address) === 6 ? `[${address}]` : address
        const url = `https://${host}:${port}`
        if (seen.has(url)) continue
        seen.add(url)
        out.push(new URL(url))
      }
    }
  }
  return out
}

export async function listApiServers(http: KubeHttp): Promise<URL[]> {
  const { body } = await http.request<{ items: EndpointSlice[] }>({
    method: 'GET',
    path: APISERVER_SLICES,
    query: { labelSelector: 'kubernetes.io/service-name=kubernetes' },
  })
  return endpointsFromSlices(body.items ?? [])
}

/** `198.18.0.2:6443`, the way people name one API server. */
export function describeEndpoint(url: URL): string {
  return url.host
}

/** One EndpointSlices answer shared by a batch's storage checks; short, so a joining server is asked within seconds. */
export const API_SERVERS_TTL_MS = 10_000

/** {@link listApiServers}, its answer shared for `ttlMs` per API server address; a failure is not kept. */
export class SharedApiServers {
  private readonly answers = new Map<string, { at: number; servers: Promise<URL[]> }>()

  constructor(
    private readonly ttlMs = API_SERVERS_TTL_MS,
    private readonly now: () => number = () => performance.now(),
    private readonly list: (http: KubeHttp) => Promise<URL[]> = listApiServers,
  ) {}

  get(http: KubeHttp): Promise<URL[]> {
    const key = http.server.href
    const kept = this.answers.get(key)
    if (kept && this.now() - kept.at < this.ttlMs) return kept.servers
    const servers = this.list(http)
    const entry = { at: this.now(), servers }
    this.answers.set(key, entry)
    servers.catch(() => {
      if (this.answers.get(key) === entry) this.answers.delete(key)
    })
    return servers
  }
}

/** The process's shared answers (the storage checks of every run). */
export const sharedApiServers = new SharedApiServers()
