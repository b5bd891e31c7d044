/**
 * The API servers of a cluster, one by one: the `default/kubernetes` Service's
 * EndpointSlices list every kube-apiserver (each publishes itself there), so the migrator
 * can ask each of them, by address, what it stores.
 */
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

/** The API servers the `default/kubernetes` EndpointSlices list. */
export async function listApiServers(http: KubeHttp): Promise<URL[]> {
  const list = (
    await http.request<{ items: EndpointSlice[] }>({
      method: 'GET',
      path: APISERVER_SLICES,
      query: { labelSelector: 'kubernetes.io/service-name=kubernetes' },
    })
  ).body
  return endpointsFromSlices(list.items ?? [])
}

/** `198.18.0.2:6443`, the way people name one API server. */
export function describeEndpoint(url: URL): string {
  return url.host
}
