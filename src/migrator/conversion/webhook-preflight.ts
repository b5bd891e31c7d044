/**
 * Before freezing a webhook-converted CRD, prove the webhook converts, so one that is down (a
 * cert rotation, a crash-looping operator) blocks the run before anything is frozen. The proof:
 * GETs (decoded from etcd in the stored version) of the first objects through the storage
 * version and of the first through every other served stored version: one of those converts it.
 */
import { classifyConversionError, conversionStrategy, conversionWebhookOf, type ConversionFailure } from '../../kube/conversion.js'
import { Accept } from '../../kube/http.js'
import { unlessNotFound } from '../../kube/api-errors.js'
import { listMetadata } from '../../kube/list-metadata.js'
import { objectPath, resourceRef } from '../../kube/paths.js'
import type { CustomResourceDefinition, PartialObjectMetadata } from '../../kube/types.js'
import type { RunClient } from '../engine/run-client.js'

/** Objects read through the storage version. */
const SAMPLE = 3

type PreflightVerdict = { ok: true; reads: number } | { ok: false; webhook: string; detail: string }

export async function preflightConversion(
  client: RunClient,
  crd: CustomResourceDefinition,
  storageVersion: string,
): Promise<PreflightVerdict> {
  const webhook = conversionWebhookOf(crd)
  if (conversionStrategy(crd) !== 'Webhook' || webhook === undefined) return { ok: true, reads: 0 }
  const { http, signal } = client
  const storedServed = new Set(crd.spec.versions.filter((v) => v.served).map((v) => v.name))
  const otherVersions = (crd.status?.storedVersions ?? []).filter((v) => v !== storageVersion && storedServed.has(v))

  let reads = 0
  // Transient errors of the API server are retried as usual; a conversion failure is the answer.
  const convert = async (request: () => Promise<unknown>): Promise<ConversionFailure | undefined> =>
    client.retry(async () => {
      try {
        await request()
        reads++
        return undefined
      } catch (err) {
        const failure = classifyConversionError(err)
        if (failure) return failure
        throw err
      }
    })

  // The first objects through the storage version (one small page).
  let first: PartialObjectMetadata[] = []
  const listed = await convert(async () => {
    for await (const page of listMetadata(http, resourceRef(crd, storageVersion), { pageSize: SAMPLE, ...(signal ? { signal } : {}) })) {
      first = page.items.slice(0, SAMPLE)
      break
    }
  })
  if (listed?.kind === 'outage') return { ok: false, webhook, detail: listed.detail }
  const probes: Array<{ item: PartialObjectMetadata; version: string }> = [
    ...first.map((item) => ({ item, version: storageVersion })),
    ...(first[0] ? otherVersions.map((version) => ({ item: first[0]!, version })) : []),
  ]
  for (const { item, version } of probes) {
    const path = objectPath(resourceRef(crd, version), item.metadata.namespace, item.metadata.name)
    // A 404: deleted since it was listed.
    const failure = await unlessNotFound(convert(() => http.request({ method: 'GET', path, accept: Accept.partialObjectMetadata, signal })))
    // A refusal is about one object: the run reports those object by object.
    if (failure?.kind === 'outage') return { ok: false, webhook, detail: failure.detail }
  }
  return { ok: true, reads }
}
