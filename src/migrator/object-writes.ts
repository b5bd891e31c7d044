import { Accept, ContentType, isConflict, isFailedPatchTest, isNotFound, type KubeHttp } from '../kube/http.js'
import { apiVersionOf, objectPath, type ResourceRef } from '../kube/paths.js'
import type { PartialObjectMetadata } from '../kube/types.js'
import { cleanManagedFields, managedFieldsPatch, type ManagedFieldsPolicy } from './managed-fields.js'
import { withRetry, type RetryOptions } from './retry.js'
import type { Outcome } from './walker.js'

export interface WriteContext {
  http: KubeHttp
  /** The resource addressed through its storage version. */
  ref: ResourceRef
  retry: RetryOptions
}

/**
 * The no-op write of storage version migration: a JSON merge patch that changes nothing
 * but carries uid and resourceVersion as preconditions. The API server decodes the object,
 * re-encodes it in the storage version and writes it, unless the bytes are identical
 * (already stored that way), in which case the resourceVersion does not move. A merge
 * patch rather than server-side apply, because apply can create an object that was
 * deleted meanwhile and so needs `create` permission.
 */
export function makeRewriteHandler(ctx: WriteContext, useStatusSubresource: boolean): (item: PartialObjectMetadata) => Promise<Outcome> {
  const apiVersion = apiVersionOf(ctx.ref)
  return async (item) => {
    const { name, namespace, uid, resourceVersion } = item.metadata
    const body = { apiVersion, kind: ctx.ref.kind, metadata: { uid, resourceVersion } }
    try {
      const res = await withRetry(
        () =>
          ctx.http.request<PartialObjectMetadata>({
            method: 'PATCH',
            path: objectPath(ctx.ref, namespace, name, useStatusSubresource ? 'status' : undefined),
            body,
            contentType: ContentType.mergePatch,
            // Only metadata back: we need the new resourceVersion, not the object.
            accept: Accept.partialObjectMetadata,
          }),
        ctx.retry,
      )
      return res.body?.metadata?.resourceVersion === resourceVersion ? 'current' : 'rewritten'
    } catch (err) {
      // Deleted, or written by someone else since we listed it: either way no old
      // encoding of this object is left behind by it.
      if (isNotFound(err)) return 'gone'
      if (isConflict(err)) return 'conflict'
      throw err
    }
  }
}

/**
 * Removes managedFields entries of unserved versions with a JSON Patch that first tests
 * the resourceVersion; when someone wrote in between, re-read and try again.
 */
export function makeCleanupHandler(
  ctx: WriteContext,
  policy: ManagedFieldsPolicy,
  onRemoved: (entries: number) => void,
  maxConflicts = 5,
): (item: PartialObjectMetadata) => Promise<Outcome> {
  return async (item) => {
    let meta = item.metadata
    for (let attempt = 1; ; attempt++) {
      const cleanup = cleanManagedFields(meta.managedFields, policy)
      if (!cleanup.changed) return attempt === 1 ? 'skipped' : 'conflict'
      try {
        await withRetry(
          () =>
            ctx.http.request({
              method: 'PATCH',
              path: objectPath(ctx.ref, meta.namespace, meta.name),
              body: managedFieldsPatch(meta.resourceVersion ?? '', cleanup.managedFields),
              contentType: ContentType.jsonPatch,
              accept: Accept.partialObjectMetadata,
            }),
          ctx.retry,
        )
        onRemoved(cleanup.removed.length)
        return 'rewritten'
      } catch (err) {
        if (isNotFound(err)) return 'gone'
        if (!(isConflict(err) || isFailedPatchTest(err)) || attempt >= maxConflicts) throw err
      }
      try {
        meta = (
          await withRetry(
            () =>
              ctx.http.request<PartialObjectMetadata>({
                method: 'GET',
                path: objectPath(ctx.ref, meta.namespace, meta.name),
                accept: Accept.partialObjectMetadata,
              }),
            ctx.retry,
          )
        ).body.metadata
      } catch (err) {
        if (isNotFound(err)) return 'gone'
        throw err
      }
    }
  }
}
