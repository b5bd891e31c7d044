/**
 * Phase StashedObjectMigration: copies of a CRD's objects stashed in other objects (KubeVirt's
 * ControllerRevisions) move to the storage version, so the old version can really go. A stash's
 * data is immutable, so each is replaced (KubeVirt's design, ../shared/seeds/003): referrers found,
 * the object converted, the replacement created, every referrer repointed, the old stash deleted
 * (each step's guard: docs/migrate-one-crd.md#stashed-copies-kubevirts-controllerrevisions). Any
 * order of crashes leaves nothing the next run does not finish (test/integration/stashed-copies.test.ts).
 */
import { isDeepStrictEqual } from 'node:util'
import { CrdMigratorError, describeError } from '../../../errors.js'
import { convertObjects } from '../../../kube/conversion-review.js'
import { ContentType } from '../../../kube/http.js'
import { isConflict, isNotFound, isUnprocessable, unlessNotFound } from '../../../kube/api-errors.js'
import { listPages } from '../../../kube/list-pages.js'
import { apiVersionOf, collectionPath, listOrderKey, objectPath, type ResourceRef } from '../../../kube/paths.js'
import { resolveResource } from '../../../kube/resources.js'
import type { CustomResourceDefinition } from '../../../kube/types.js'
import type { RunContext, StashResult } from '../../context.js'
import type { RunClient } from '../../engine/run-client.js'
import { objectFailure } from '../../engine/walker.js'
import type { Obj } from '../../lossless/content-diff.js'
import { embeddedOf, newStashBody, newStashName, pointersAt, repointPatch, valueAt, type StashObject } from './stash-plan.js'
import type { StashRule } from './rules.js'

interface Referrer {
  ref: ResourceRef
  object: Obj & { metadata: { name: string; namespace?: string } }
  pointers: string[]
}

export async function runStashPhase(
  crd: CustomResourceDefinition,
  storageVersion: string,
  rules: readonly StashRule[],
  ctx: Pick<RunContext, 'http' | 'logger' | 'signal' | 'client'>,
  options: { dryRun?: boolean } = {},
): Promise<StashResult> {
  const result: StashResult = { counts: { seen: 0, current: 0, migrated: 0, failed: 0, repointed: 0 }, failures: [], planned: [] }
  const client = ctx.client
  const log = ctx.logger.child({ crd: crd.metadata.name, phase: 'StashedObjectMigration' })
  for (const rule of rules) {
    const source = await resolveResource(ctx.http, rule.source)
    const referrerRefs = await Promise.all(rule.referrers.map((r) => resolveResource(ctx.http, r)))
    const referrers = new ReferrerIndex(client, rule, referrerRefs)
    for await (const stash of listObjects<StashObject>(client, source, rule.source.labelSelector, rule.source.namespaces)) {
      ctx.signal?.throwIfAborted()
      const embedded = embeddedOf(stash, rule, [crd.spec.names.kind])
      if (!embedded) continue
      result.counts.seen++
      if (embedded.version === storageVersion) {
        result.counts.current++
        continue
      }
      const key = listOrderKey(stash.metadata.namespace, stash.metadata.name)
      try {
        const moved = await migrateStash(stash, embedded.object, embedded.version)
        result.counts.migrated++
        result.counts.repointed += moved
      } catch (err) {
        result.counts.failed++
        result.failures.push(objectFailure(key, err))
        log.warn({ stash: key, error: describeError(err) }, 'stash not migrated')
      }
    }

    async function migrateStash(stash: StashObject, object: Obj, version: string): Promise<number> {
      const { name, namespace } = stash.metadata
      const replacement = newStashName(name, storageVersion)
      const pointing = await referrers.pointingAt(namespace, name)
      const alreadyMoved = await referrers.pointingAt(namespace, replacement)
      if (pointing.length === 0 && alreadyMoved.length === 0)
        throw new CrdMigratorError(
          'CRDM_STASH_FAILED',
          `nothing points at it, so it was left at ${version}; delete it if it is unused, or add the referrer to the stash rule`,
        )
      const pointers = pointing.reduce((n, r) => n + r.pointers.length, 0)
      if (options.dryRun) {
        result.planned.push(
          `${listOrderKey(namespace, name)}: ${version} -> ${storageVersion} as ${replacement}; ${pointers} referrer pointer(s) moved; the old one deleted`,
        )
        return pointers
      }
      const [converted] = await convertObjects(crd, [object], storageVersion)
      const body = newStashBody(stash, converted!, storageVersion, rule)
      await ensureStash(client, source, body, rule)
      for (const r of pointing) for (const pointer of r.pointers) await repoint(r, pointer, name, replacement)
      if ((await referrers.pointingAt(namespace, name, true)).length > 0)
        throw new CrdMigratorError('CRDM_STASH_FAILED', `a referrer points at it again; ${replacement} was made, the old stash is kept`)
      await deleteStash(client, source, stash)
      log.info({ stash: listOrderKey(namespace, name), replacement, from: version, to: storageVersion, pointers }, 'stash migrated')
      return pointers
    }

    async function repoint(r: Referrer, pointer: string, from: string, to: string): Promise<void> {
      const path = objectPath(r.ref, r.object.metadata.namespace, r.object.metadata.name)
      try {
        await client.request({ method: 'PATCH', path, body: repointPatch(pointer, from, to), contentType: ContentType.jsonPatch })
      } catch (err) {
        // Gone, or refused: a failed `test` of the pointer answers a bare 422, like any
        // other refusal of the patch, so the referrer as it is now says which it was.
        if (isNotFound(err)) return
        if (!(isUnprocessable(err) || isConflict(err))) throw err
        const now = (await client.request<Obj>({ method: 'GET', path })).body
        const value = valueAt(now, pointer)
        if (value === to) return
        if (value === from) throw err // the test held: the patch itself was refused
        throw new CrdMigratorError(
          'CRDM_STASH_FAILED',
          `referrer ${listOrderKey(r.object.metadata.namespace, r.object.metadata.name)} changed meanwhile (${pointer} is now ${JSON.stringify(value)}); the old stash is kept`,
        )
      }
    }
  }
  return result
}

/** Creates the replacement, or finds it made by an earlier run, with the same content. */
async function ensureStash(client: RunClient, source: ResourceRef, body: StashObject, rule: StashRule): Promise<void> {
  const collection = collectionPath(source, source.namespaced ? body.metadata.namespace : undefined)
  try {
    await client.request({ method: 'POST', path: collection, body: { apiVersion: apiVersionOf(source), kind: source.kind, ...body } })
    return
  } catch (err) {
    if (!isConflict(err)) throw err
  }
  const existing = (
    await client.request<StashObject>({ method: 'GET', path: objectPath(source, body.metadata.namespace, body.metadata.name) })
  ).body
  if (!isDeepStrictEqual(valueAt(existing, rule.source.dataPointer), valueAt(body, rule.source.dataPointer)))
    throw new CrdMigratorError('CRDM_STASH_FAILED', `${body.metadata.name} already exists and holds something else; nothing changed`)
}

/** Deletes the old stash, only that very object (uid precondition); gone already is fine. */
async function deleteStash(client: RunClient, source: ResourceRef, stash: StashObject): Promise<void> {
  await unlessNotFound(
    client.request({
      method: 'DELETE',
      path: objectPath(source, stash.metadata.namespace, stash.metadata.name),
      body: { apiVersion: 'v1', kind: 'DeleteOptions', preconditions: { uid: stash.metadata.uid } },
    }),
  )
}

/** Every object of a resource (all namespaces, or the ones given), page by page. */
async function* listObjects<T>(
  client: RunClient,
  ref: ResourceRef,
  labelSelector: string | undefined,
  namespaces: readonly string[],
): AsyncGenerator<T> {
  const paths = namespaces.length ? namespaces.map((ns) => collectionPath(ref, ns)) : [collectionPath(ref)]
  for (const path of paths)
    for await (const page of listPages<T>(client, path, { query: { labelSelector }, pageSize: 250 }))
      for (const item of page.items) yield item
}

/** The referrers of a namespace, read once per namespace and resource, read again on demand. */
class ReferrerIndex {
  private readonly byNamespace = new Map<string, Referrer['object'][][]>()

  constructor(
    private readonly client: RunClient,
    private readonly rule: StashRule,
    private readonly refs: ResourceRef[],
  ) {}

  async pointingAt(namespace: string | undefined, name: string, fresh = false): Promise<Referrer[]> {
    const ns = namespace ?? ''
    if (fresh || !this.byNamespace.has(ns)) {
      const lists = await Promise.all(
        this.refs.map(async (ref) => {
          const items: Referrer['object'][] = []
          const namespaces = ref.namespaced && namespace ? [namespace] : []
          for await (const o of listObjects<Referrer['object']>(this.client, ref, undefined, namespaces)) items.push(o)
          return items
        }),
      )
      this.byNamespace.set(ns, lists)
    }
    const out: Referrer[] = []
    this.byNamespace.get(ns)!.forEach((items, i) => {
      const pointers = this.rule.referrers[i]!.pointers
      for (const object of items) {
        const at = pointersAt(object, pointers, name)
        if (at.length) out.push({ ref: this.refs[i]!, object, pointers: at })
      }
    })
    return out
  }
}
