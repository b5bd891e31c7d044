import { createHash } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { KubeHttp } from './http.js'
import { groupPath, groupVersionPath } from './paths.js'
import { unlessNotFound } from './api-errors.js'
import { CrdMigratorError } from '../errors.js'
import { wholeSeconds } from '../duration.js'

/** The API server's storage version hash of a group/version/kind (k8s.io/apiserver discovery). */
export function storageVersionHash(group: string, version: string, kind: string): string {
  return createHash('sha256').update(`${group}/${version}/${kind}`).digest().subarray(0, 8).toString('base64')
}

export interface APIResourceList {
  resources?: { name: string; storageVersionHash?: string }[]
}

export async function groupVersionResources(http: KubeHttp, group: string, version: string): Promise<APIResourceList> {
  return (await http.request<APIResourceList>({ method: 'GET', path: groupVersionPath({ group, version }) })).body
}

export function hashOf(list: APIResourceList, plural: string): string | undefined {
  return list.resources?.find((r) => r.name === plural)?.storageVersionHash
}

export async function servedStorageVersionHash(
  http: KubeHttp,
  group: string,
  version: string,
  plural: string,
): Promise<string | undefined> {
  return hashOf(await groupVersionResources(http, group, version), plural)
}

export interface StorageSettleOptions {
  timeoutMs: number
  /** How long the new hash must be seen before writes start. */
  settleMs: number
  signal?: AbortSignal
  /** Reads the served hash (default: one discovery read each time; storage-switch.ts shares them, discovery-cache.ts). */
  served?: (http: KubeHttp, group: string, version: string, plural: string, want: string) => Promise<string | undefined>
  /**
   * Told each answer (does it serve the hash?); returns since when the server has served it,
   * earlier answers included (storage-agreement.ts). Default: since this wait's first answer.
   */
  agreedSince?: (shows: boolean) => number | undefined
}

/**
 * Waits until new writes are encoded in `version`: a storage flip reaches the handler through
 * an informer (on each API server), so a write right after it may still store the old version.
 * Discovery's hash comes from the same informer, after the fact: we wait for it, settle, check again.
 */
export async function waitForStorageVersion(
  http: KubeHttp,
  crd: { group: string; plural: string; kind: string },
  version: string,
  options: StorageSettleOptions,
): Promise<void> {
  const want = storageVersionHash(crd.group, version, crd.kind)
  const deadline = Date.now() + options.timeoutMs
  const sleepOpts = options.signal ? { signal: options.signal } : undefined
  const served = options.served ?? servedStorageVersionHash
  let matchedSince: number | undefined
  let seen: string | undefined
  for (;;) {
    try {
      seen = await served(http, crd.group, version, crd.plural, want)
    } catch {
      seen = undefined // discovery briefly 404s or 503s right after a change
    }
    if (seen === want) {
      matchedSince = options.agreedSince?.(true) ?? matchedSince ?? Date.now()
      if (Date.now() - matchedSince >= options.settleMs) return
    } else {
      options.agreedSince?.(false)
      matchedSince = undefined
    }
    if (Date.now() > deadline) {
      throw new CrdMigratorError(
        'CRDM_STORAGE_NOT_SWITCHED',
        `the API server did not switch to storage version ${version} within ${wholeSeconds(options.timeoutMs)} (discovery storageVersionHash ${seen ?? 'absent'}, expected ${want})`,
      )
    }
    await sleep(Math.min(250, Math.max(50, options.settleMs / 4)), undefined, sleepOpts)
  }
}

/** An API group as discovery lists it; the core group is `''`. */
export interface ApiGroup {
  name: string
  versions: { groupVersion: string; version: string }[]
  preferredVersion?: { groupVersion: string; version: string }
}

/** A resource of the discovery documents, with the version it was read at. */
export interface DiscoveredResource {
  group: string
  version: string
  resource: string
  /** Empty for resources the API server stores nowhere (subresources, aggregated APIs). */
  storageVersionHash: string
}

/** Every API group the server serves, the core group first (client-go's ServerGroups). */
export async function apiGroups(http: KubeHttp): Promise<ApiGroup[]> {
  const core = (await http.request<{ versions?: string[] }>({ method: 'GET', path: '/api' })).body
  const groups = (await http.request<{ groups?: ApiGroup[] }>({ method: 'GET', path: '/apis' })).body
  const coreVersions = (core.versions ?? []).map((v) => ({ groupVersion: v, version: v }))
  const coreGroup: ApiGroup = { name: '', versions: coreVersions, ...(coreVersions[0] ? { preferredVersion: coreVersions[0] } : {}) }
  return [coreGroup, ...(groups.groups ?? [])]
}

/** One API group's discovery document (`/apis/<group>`); undefined when it is not served. */
export async function apiGroup(http: KubeHttp, group: string): Promise<ApiGroup | undefined> {
  if (group === '') return (await apiGroups(http))[0]
  return (await unlessNotFound(http.request<ApiGroup>({ method: 'GET', path: groupPath(group) })))?.body
}

/** client-go's ServerPreferredResources (what KSVM's trigger reads), subresources left out; unreadable group versions in `failed`. */
export async function preferredResources(
  http: KubeHttp,
  groups: ApiGroup[],
): Promise<{ resources: DiscoveredResource[]; failed: { groupVersion: string; err: unknown }[] }> {
  const gvs = groups.flatMap((g) => g.versions.map((v) => ({ group: g, version: v.version, groupVersion: v.groupVersion })))
  const lists = new Map<string, APIResourceList>()
  const failed: { groupVersion: string; err: unknown }[] = []
  for (let i = 0; i < gvs.length; i += 8) {
    await Promise.all(
      gvs.slice(i, i + 8).map(async (gv) => {
        try {
          lists.set(gv.groupVersion, await groupVersionResources(http, gv.group.name, gv.version))
        } catch (err) {
          failed.push({ groupVersion: gv.groupVersion, err })
        }
      }),
    )
  }
  const chosen = new Map<string, DiscoveredResource>()
  for (const { group, version, groupVersion } of gvs) {
    for (const r of lists.get(groupVersion)?.resources ?? []) {
      if (r.name.includes('/')) continue
      const key = `${r.name}.${group.name}`
      if (chosen.has(key) && version !== group.preferredVersion?.version) continue
      chosen.set(key, { group: group.name, version, resource: r.name, storageVersionHash: r.storageVersionHash ?? '' })
    }
  }
  return { resources: [...chosen.values()], failed }
}
