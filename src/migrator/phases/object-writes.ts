import { CrdMigratorError, errorMessage } from '../../errors.js'
import { FIELD_MANAGER } from '../../version.js'
import { ManagedFieldsDroppedError } from '../../kube/conversion.js'
import { Accept, ContentType } from '../../kube/http.js'
import { isConflict, isNotFound, isUnprocessable, unlessNotFound } from '../../kube/api-errors.js'
import { apiVersionOf, listOrderKey, objectPath, type ResourceRef } from '../../kube/paths.js'
import type { ManagedFieldsEntry, PartialObjectMetadata } from '../../kube/types.js'
import { cleanManagedFields, entryIdentity, managedFieldsPatch, type ManagedFieldsPolicy } from './managed-fields.js'
import type { RunClient } from '../engine/run-client.js'
import type { Outcome } from '../engine/walker.js'

export interface WriteContext {
  /** The phase's client: the run's retries, with the phase's throttle gate. */
  client: RunClient
  /** The resource addressed through its storage version. */
  ref: ResourceRef
  /** A write found the object changed since it was read (it is read again and the write retried). */
  onStale?: () => void
}

/** How the storage phase's no-op write is sent: see makeRewriteHandler. */
export type RewriteWrite = 'merge-patch' | 'apply'

/**
 * The storage migration's no-op write, with uid and resourceVersion as preconditions: the API
 * server re-encodes the object in the storage version and writes it unless the bytes are the
 * same (then the resourceVersion does not move). `merge-patch` (conversion None): an empty merge
 * patch, the cheapest write. `apply` (webhook conversion): an outage costs a retry, never
 * ownership (why: docs/conversion-webhooks.md); with the uid precondition it never recreates a
 * deleted object (409 "uid mismatch"), so it needs no `create` permission.
 */
export function makeRewriteHandler(
  ctx: WriteContext,
  useStatusSubresource: boolean,
  write: RewriteWrite = 'merge-patch',
  /**
   * An apply fails on entries of a version the CRD no longer defines (kubernetes/kubernetes#111937):
   * such objects get this instead, which removes them and stores the object in storage version too.
   */
  undefinedVersions?: { present: (item: PartialObjectMetadata) => boolean; drop: (item: PartialObjectMetadata) => Promise<Outcome> },
): (item: PartialObjectMetadata) => Promise<Outcome> {
  const apiVersion = apiVersionOf(ctx.ref)
  const apply = write === 'apply'
  const contentType = apply ? ContentType.applyPatch : ContentType.mergePatch
  const query = apply ? { fieldManager: FIELD_MANAGER } : undefined
  return async (item) => {
    if (apply && undefinedVersions?.present(item)) {
      const outcome = await undefinedVersions.drop(item)
      if (outcome !== 'skipped') return outcome
    }
    const { name, namespace, uid, resourceVersion } = item.metadata
    const metadata = apply ? { name, ...(namespace ? { namespace } : {}), uid, resourceVersion } : { uid, resourceVersion }
    const body = { apiVersion, kind: ctx.ref.kind, metadata }
    const path = objectPath(ctx.ref, namespace, name, useStatusSubresource ? 'status' : undefined)
    try {
      const res = await ctx.client.request<PartialObjectMetadata>({
        method: 'PATCH',
        path,
        ...(query ? { query } : {}),
        body,
        contentType,
        // Only metadata back: we need the new resourceVersion, not the object.
        accept: Accept.partialObjectMetadata,
      })
      return res.body?.metadata?.resourceVersion === resourceVersion ? 'current' : 'rewritten'
    } catch (err) {
      if (isNotFound(err)) return 'gone'
      // Written by someone else since listed (so stored in the storage version), or deleted and
      // perhaps recreated (a uid precondition answers 409 too): the object says which.
      if (isConflict(err)) return (await readMetadata(ctx, item))?.metadata.uid === uid ? 'conflict' : 'gone'
      throw err
    }
  }
}

async function readMetadata(ctx: WriteContext, item: PartialObjectMetadata): Promise<PartialObjectMetadata | undefined> {
  const res = await unlessNotFound(
    ctx.client.request<PartialObjectMetadata>({
      method: 'GET',
      path: objectPath(ctx.ref, item.metadata.namespace, item.metadata.name),
      accept: Accept.partialObjectMetadata,
    }),
  )
  return res?.body
}

/** Removes unserved-version entries with a JSON Patch carrying the resourceVersion read; when someone wrote in between, reads again and retries. */
export function makeCleanupHandler(
  ctx: WriteContext,
  policy: ManagedFieldsPolicy,
  onCleaned: (entries: { removed: number; relabelled: number }) => void,
  maxConflicts = 8,
): (item: PartialObjectMetadata) => Promise<Outcome> {
  return async (item) => {
    let meta = item.metadata
    const key = listOrderKey(meta.namespace, meta.name)
    // Set once the API server dropped the entries we wrote (its conversion webhook was
    // down): from then on, that list is what must be put back, whatever is there now.
    let mustRestore: ManagedFieldsEntry[] | undefined
    let cleaned = { removed: 0, relabelled: 0 }
    for (let attempt = 1; ; attempt++) {
      let target: ManagedFieldsEntry[]
      if (mustRestore) {
        target = withEntriesAddedSince(mustRestore, meta.managedFields)
      } else {
        const cleanup = cleanManagedFields(meta.managedFields, policy)
        if (!cleanup.changed) return attempt === 1 ? 'skipped' : 'conflict'
        target = cleanup.managedFields
        cleaned = { removed: cleanup.removed.length, relabelled: cleanup.relabelled }
      }
      let resourceVersion = meta.resourceVersion ?? ''
      try {
        await ctx.client.retry(async () => {
          const res = await ctx.client.http.request<PartialObjectMetadata>({
            method: 'PATCH',
            path: objectPath(ctx.ref, meta.namespace, meta.name),
            body: managedFieldsPatch(resourceVersion, target),
            contentType: ContentType.jsonPatch,
            accept: Accept.partialObjectMetadata,
          })
          if (target.length > 0 && !res.body?.metadata?.managedFields?.length) {
            // Stored, but without any managedFields: put them back once the webhook answers.
            resourceVersion = res.body?.metadata?.resourceVersion ?? resourceVersion
            mustRestore = target
            throw new ManagedFieldsDroppedError(key, target)
          }
          return res
        })
        onCleaned(cleaned)
        return 'rewritten'
      } catch (err) {
        if (isNotFound(err)) return 'gone'
        // 409: someone wrote since our read. 422: our patch was refused, or (from a server
        // that answers a stale precondition that way) someone wrote: the object says which.
        const maybeStale = isConflict(err) || isUnprocessable(err)
        if (mustRestore && !maybeStale)
          throw new CrdMigratorError(
            'CRDM_CONVERSION_OUTAGE',
            `${errorMessage(err)}; the API server dropped the managedFields of ${key} while the conversion webhook was down, and they could not be put back: ${JSON.stringify(mustRestore)}`,
            { cause: err },
          )
        if (!maybeStale || attempt >= maxConflicts) throw err
        const now = await readMetadata(ctx, { metadata: meta })
        if (!now) return 'gone'
        if (isUnprocessable(err) && now.metadata.resourceVersion === resourceVersion) throw err
        ctx.onStale?.()
        meta = now.metadata
      }
    }
  }
}

/** The list to restore after the API server dropped it, plus entries another write created since (same identity: ours wins). */
function withEntriesAddedSince(restore: ManagedFieldsEntry[], current: readonly ManagedFieldsEntry[] | undefined): ManagedFieldsEntry[] {
  const known = new Set(restore.map(entryIdentity))
  return [...restore, ...(current ?? []).filter((e) => !known.has(entryIdentity(e)))]
}
