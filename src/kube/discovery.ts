import { createHash } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { KubeHttp } from './http.js'
import { groupVersionPath } from './paths.js'
import { CrdMigratorError } from '../errors.js'

/** The API server's storage version hash of a group/version/kind (k8s.io/apiserver discovery). */
export function storageVersionHash(group: string, version: string, kind: string): string {
  return createHash('sha256').update(`${group}/${version}/${kind}`).digest().subarray(0, 8).toString('base64')
}

interface APIResourceList {
  resources?: { name: string; storageVersionHash?: string }[]
}

export async function servedStorageVersionHash(
  http: KubeHttp,
  group: string,
  version: string,
  plural: string,
): Promise<string | undefined> {
  const list = (await http.request<APIResourceList>({ method: 'GET', path: groupVersionPath({ group, version }) })).body
  return list.resources?.find((r) => r.name === plural)?.storageVersionHash
}

export interface StorageSettleOptions {
  timeoutMs: number
  /** How long the new hash must be seen before writes start. */
  settleMs: number
  signal?: AbortSignal
}

/**
 * Waits until the API server encodes new writes in `version`. A storage flip reaches the
 * custom-resource handler asynchronously (through an informer, on every API server of an
 * HA control plane), so a no-op write right after the flip can still be stored in the old
 * version and be counted as done. Discovery publishes the storage version hash from the
 * same informer, after the fact; we wait for it, then for a settle time, and check again.
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
  let matchedSince: number | undefined
  let seen: string | undefined
  for (;;) {
    try {
      seen = await servedStorageVersionHash(http, crd.group, version, crd.plural)
    } catch {
      seen = undefined // discovery briefly 404s or 503s right after a change
    }
    if (seen === want) {
      matchedSince ??= Date.now()
      if (Date.now() - matchedSince >= options.settleMs) return
    } else {
      matchedSince = undefined
    }
    if (Date.now() > deadline) {
      throw new CrdMigratorError(
        'CRDM_STORAGE_NOT_SWITCHED',
        `the API server did not switch to storage version ${version} within ${Math.round(options.timeoutMs / 1000)}s (discovery storageVersionHash ${seen ?? 'absent'}, expected ${want})`,
      )
    }
    await sleep(Math.min(250, Math.max(50, options.settleMs / 4)), undefined, sleepOpts)
  }
}
