/**
 * "Is it safe to drop this version?" as a pure decision over what drop-evidence.ts gathered; each
 * check, and why it blocks: docs/dropping-a-version.md#before-dropping-a-version-check-and-plan.
 */
import type { CrdState } from '../state/crd-state.js'

/** The migrator's own record on the CRD (its state annotations), for people: never proof on its own. */
export type MigratorRecord = Pick<CrdState, 'frozen' | 'owner' | 'phase' | 'progress' | 'lastResult' | 'observedGeneration'>

/** A count, or why it could not be made. */
export type Counted = { count: number } | { unknown: string }

/** Stashed copies (migrator.stashes / stashPresets) at the version; `rules` 0: no rule names the CRD's group. */
export type StashEvidence = { rules: number; atVersion: number; where: string[] } | { rules: number; unknown: string }

/** apiserver_requested_deprecated_apis of the answering API server (since it started; deprecated versions only); unknown when /metrics may not be read. */
export type ClientEvidence = { requested: boolean } | { unknown: string }

export interface DropEvidence {
  crd: string
  group: string
  version: string
  /** spec.versions has the version. */
  defined: boolean
  served: boolean
  storage: boolean
  deprecated: boolean
  storageVersion: string | undefined
  storedVersions: readonly string[]
  generation: number
  /** Objects of the CRD (all versions: one etcd collection). */
  objects: Counted
  /** Objects with a managedFields entry whose apiVersion is group/version. */
  managedFields: Counted
  stashes: StashEvidence
  /** Only asked for a served, deprecated version. */
  clients: ClientEvidence | undefined
  migrator: MigratorRecord
}

// manifests: custom resources in `check --manifests` files written at the version (src/check/manifest-resources.ts).
export const CHECKS = [
  'defined',
  'storedVersions',
  'objects',
  'managedFields',
  'stashes',
  'storage',
  'served',
  'clients',
  'manifests',
  'lossless',
] as const
export type CheckName = (typeof CHECKS)[number]

export interface Reason {
  check: CheckName
  status: 'blocks' | 'ok' | 'unknown'
  message: string
}

export interface DropVerdict {
  crd: string
  /** Unset when nothing is dropped (a manifest keeping every version, a CRD not in the cluster). */
  version: string | undefined
  safe: boolean
  reasons: Reason[]
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`

/** `strict`: a check that could not be made answers no. */
export function decideDrop(e: DropEvidence, options: { strict?: boolean } = {}): DropVerdict {
  const reasons = e.defined
    ? [storedVersions(e), objects(e), managedFields(e), stashes(e), storage(e), served(e), clients(e)]
    : notDefined(e)
  const blocking = reasons.some((r) => r.status === 'blocks' || (options.strict === true && r.status === 'unknown'))
  return { crd: e.crd, version: e.version, safe: !blocking, reasons }
}

/** The reasons one check gives, by status. */
export function reasonsOf(check: CheckName): Record<Reason['status'], (message: string) => Reason> {
  const as = (status: Reason['status']) => (message: string) => ({ check, status, message })
  return { ok: as('ok'), blocks: as('blocks'), unknown: as('unknown') }
}

function notDefined(e: DropEvidence): Reason[] {
  const reason = reasonsOf('defined')
  // The API server keeps storedVersions within spec.versions, so an undefined version can only be listed by a hand-written status.
  if (e.storedVersions.includes(e.version)) return [reason.ok(`${e.version} is not a version of ${e.crd} any more`), storedVersions(e)]
  return [reason.ok(`${e.version} is not a version of ${e.crd}: nothing to drop`)]
}

function storedVersions(e: DropEvidence): Reason {
  const reason = reasonsOf('storedVersions')
  const list = `[${e.storedVersions.join(', ')}]`
  if (!e.storedVersions.includes(e.version)) return reason.ok(`status.storedVersions ${list} does not list ${e.version}`)
  if (e.storage)
    return reason.blocks(
      `status.storedVersions ${list} lists ${e.version}, the storage version: the API server refuses to remove it from spec.versions`,
    )
  // A migration that its lossless check refused will not narrow them until the changes are accepted.
  const refused = e.migrator.lastResult?.startsWith('Blocked: CRDM_DATA_LOSS')
  return reason.blocks(
    refused
      ? `status.storedVersions ${list} still lists ${e.version}, and crd-migrator's last run stopped Blocked (CRDM_DATA_LOSS): rewriting the objects in ${e.storageVersion ?? 'the storage version'} would change their content; \`crd-migrator plan ${e.crd}\` lists each change and the flag that accepts it, then \`crd-migrator migrate ${e.crd}\` with it`
      : `status.storedVersions ${list} still lists ${e.version}: the API server refuses to remove it from spec.versions (\`crd-migrator migrate ${e.crd}\` rewrites every object, then narrows it to [${e.storageVersion ?? 'the storage version'}])`,
  )
}

/** Whether objects may still be stored at the version; "rewritten" only on the API server's word or the migrator's record. */
function objects(e: DropEvidence): Reason {
  const reason = reasonsOf('objects')
  const record = describeRecord(e)
  if (!e.storedVersions.includes(e.version))
    return reason.ok(`no object is stored at ${e.version} by the API server's record (status.storedVersions)${record ? `; ${record}` : ''}`)
  if ('unknown' in e.objects) return reason.unknown(`could not tell: ${e.objects.unknown}`)
  const n = e.objects.count
  if (n === 0) return reason.ok(`no objects: nothing is stored at ${e.version}`)
  if (e.storage) return reason.blocks(`${plural(n, 'object is', 'objects are')} stored at ${e.version}: it is the storage version`)
  const why = record ?? 'no crd-migrator run on record'
  return reason.blocks(`${plural(n, 'object')} not known to be rewritten, may still be stored at ${e.version}: ${why}`)
}

/** What the migrator's annotations say about this generation, for people. */
function describeRecord(e: DropEvidence): string | undefined {
  const m = e.migrator
  if (m.frozen) {
    const by = m.owner ? `by ${m.owner}` : 'by another migrator'
    return `a migration ${by} is under way${m.phase ? ` (phase ${m.phase}${m.progress ? `, ${m.progress}` : ''})` : ''}`
  }
  if (m.lastResult?.startsWith('Succeeded')) {
    if (m.observedGeneration === e.generation) return `crd-migrator's last run (generation ${e.generation}) succeeded`
    if (m.observedGeneration !== undefined)
      return `crd-migrator's last success was at generation ${m.observedGeneration}, the CRD is at ${e.generation} now: no run since`
  }
  if (m.lastResult) return `crd-migrator's last run: ${m.lastResult}`
  return undefined
}

function managedFields(e: DropEvidence): Reason {
  const reason = reasonsOf('managedFields')
  const apiVersion = `${e.group}/${e.version}`
  if ('unknown' in e.managedFields) return reason.unknown(`could not tell: ${e.managedFields.unknown}`)
  const n = e.managedFields.count
  if (n === 0) return reason.ok(`no managedFields entry at ${apiVersion}`)
  const fix = e.served
    ? `set served: false on ${e.version}, then run the migration (phase CleanupManagedFields moves or removes entries of unserved versions)`
    : 'run the migration (phase CleanupManagedFields moves or removes entries of unserved versions)'
  return reason.blocks(
    `${plural(n, 'object has', 'objects have')} managedFields entries at ${apiVersion}: server-side apply fails on them once ${e.version} is gone (kubernetes/kubernetes#111937); ${fix}`,
  )
}

function stashes(e: DropEvidence): Reason {
  const reason = reasonsOf('stashes')
  const s = e.stashes
  if (s.rules === 0) return reason.ok(`no stash rule names group ${e.group}: no stashed copies known`)
  if ('unknown' in s) return reason.unknown(`could not tell: ${s.unknown}`)
  if (s.atVersion === 0) return reason.ok(`no stashed copy at ${e.version} (${plural(s.rules, 'stash rule')})`)
  return reason.blocks(
    `${plural(s.atVersion, 'stashed copy', 'stashed copies')} at ${e.version} (${s.where.join(', ')}): nothing could read them once it is gone; run the migration (phase StashedObjectMigration)`,
  )
}

function storage(e: DropEvidence): Reason {
  const reason = reasonsOf('storage')
  if (!e.storage) return reason.ok(`${e.version} is not the storage version (${e.storageVersion ?? 'none'} is)`)
  return reason.blocks(`${e.version} is the storage version: make another version the storage version and migrate first`)
}

function served(e: DropEvidence): Reason {
  const reason = reasonsOf('served')
  if (!e.served) return reason.ok(`${e.version} is not served`)
  return reason.blocks(
    `${e.version} is still served: clients may still use it; set served: false (after deprecated: true has shown who asks for it) before removing it`,
  )
}

function clients(e: DropEvidence): Reason {
  const reason = reasonsOf('clients')
  if (!e.served) return reason.ok(`no client can request ${e.version}: it is not served`)
  if (!e.deprecated)
    return reason.unknown(
      `could not tell: ${e.version} is not marked deprecated, and the API server counts requests (apiserver_requested_deprecated_apis) only for deprecated versions`,
    )
  const c = e.clients
  if (c === undefined || 'unknown' in c) return reason.unknown(`could not tell: ${c?.unknown ?? 'not asked'}`)
  if (!c.requested)
    return reason.ok(
      `no client has requested ${e.group}/${e.version} since the API server that answered started (apiserver_requested_deprecated_apis)`,
    )
  return reason.blocks(
    `clients still request ${e.group}/${e.version}: the API server says so (apiserver_requested_deprecated_apis); its audit log names them`,
  )
}

/** The versions a manifest no longer lists: those the CRD in the cluster defines and the manifest does not. */
export function droppedVersions(live: readonly string[], manifest: readonly string[]): string[] {
  const kept = new Set(manifest)
  return live.filter((v) => !kept.has(v))
}
