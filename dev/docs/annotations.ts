/**
 * What each annotation (and label) crd-migrator reads or writes means, for the generated
 * reference. The keys come from their owner, src/state/crd-state.ts (StateAnnotation) and
 * the config defaults; the record is typed over StateAnnotation, so a new state key does
 * not compile until it is described here.
 */
import { ConsentAnnotation, StateAnnotation } from '../../src/state/crd-state.js'
import { DEFAULT_MANAGED_SELECTOR, DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'

export interface AnnotationDoc {
  key: string
  /** annotation or label, and on which object. */
  kind: string
  meaning: string
}

const STATE_MEANINGS: { readonly [K in keyof typeof StateAnnotation]: string } = {
  owner:
    'identity of the run holding the freeze (pod name, or `cli:user@host`); another instance takes the freeze over by writing its own after `--takeover-after-seconds` without a heartbeat, and a run that finds a name not its own here stops (`CRDM_FREEZE_TAKEN_OVER`) and leaves the freeze to it',
  heartbeat: 'last time that run showed it was alive (RFC 3339)',
  phase:
    '`Started`, `StorageVersionMigration`, `StashedObjectMigration` (with stash rules), `UpdatingStoredVersions`, `CleanupManagedFields`, then `Succeeded` or `Failed`; `Blocked` when a run could not start because the conversion webhook does not answer (nothing frozen)',
  progress: '`done/total` objects of the running phase, updated every `--progress-interval-seconds`',
  startedAt: 'when the freeze was set',
  targetStorageVersion: 'the storage version being migrated to',
  frozenGeneration: '`metadata.generation` when frozen; storedVersions is only patched if it is unchanged',
  checkpoint: 'list key (`namespace/name`) up to which every object is done; used to resume',
  checkpointSeal:
    'HMAC of the checkpoint, bound to this CRD and freeze, keyed by `--state-key-file`; a resumed run trusts the checkpoint only when it verifies, else looks at every object again (objects already current cost a no-op request, no etcd write)',
  builtinMigration:
    'while frozen with `--engine builtin`: the built-in StorageVersionMigration doing the storage phase (the webhook then lets kube-controller-manager mark the CRD `StorageMigrating`)',
  handedOff:
    'while frozen: when its owner (`serve` shutting down in a rolling upgrade, or losing its Lease) stopped and left the freeze, with its checkpoint, to the next leader; the heartbeat is removed with it, so the next leader resumes at once. The freeze itself is never lifted in between',
  lastResult: '`Succeeded`, `Failed: <reason>`, or `Blocked: <reason>`',
  lastCounts:
    'e.g. `rewritten=2000 alreadyCurrent=0 gone=1 failed=0 managedFieldsCleaned=30 managedFieldsEntriesRemoved=33 cleanupFailed=0`; also `conversionRefused=N`, `managedFieldsEntriesRelabelled=N` (conversion None) and `conversionOutages=N` when not zero',
  lastDuration: 'wall time of the last run, e.g. `12.3s`',
  finishedAt: 'when the last run ended',
  observedGeneration:
    'generation the last successful run handled (for people; the controller keeps its own record in memory and looks at every managed CRD once after a restart)',
}

const CONSENT_MEANINGS: { readonly [K in keyof typeof ConsentAnnotation]: string } = {
  acceptChanges:
    "field paths, comma-separated (`spec.timeout,spec.timeouts`), where the rewrite may change anything on purpose (as `--accept-changes` for this CRD); the chart's ValidatingAdmissionPolicy refuses setting or changing it to anyone without the `accept-changes` verb on this CRD",
  acceptUnchecked:
    '`"true"`: objects no view can check (stored in an unserved version, without managedFields) may be rewritten (as `--accept-unchecked`); guarded the same way',
}

/** Every key, in the order a reader meets them: the freeze, the opt-in, then the state. */
export function annotationDocs(): AnnotationDoc[] {
  const managedLabel = DEFAULT_MANAGED_SELECTOR.split('=')[0]!
  return [
    {
      key: DEFAULT_MIGRATING_ANNOTATION,
      kind: 'annotation on the CRD (the default key; `--migrating-annotation` changes it)',
      meaning:
        '`"true"` while a migration runs: the webhook freezes `spec.versions[*].storage`, keeps the storage version and every version in `status.storedVersions` served and `spec.conversion` as it is. Removing it ends the run at once (`CRDM_FREEZE_LIFTED`)',
    },
    {
      key: managedLabel,
      kind: 'label on the CRD, set by you',
      meaning: `the default selector (\`--selector\`) manages the CRDs labelled \`${DEFAULT_MANAGED_SELECTOR}\``,
    },
    ...(Object.keys(CONSENT_MEANINGS) as Array<keyof typeof ConsentAnnotation>).map((k) => ({
      key: ConsentAnnotation[k],
      kind: 'annotation on the CRD, set by a person RBAC allows to `accept-changes` it (read with `--consent-annotations`, which the chart sets)',
      meaning: CONSENT_MEANINGS[k],
    })),
    ...(Object.keys(STATE_MEANINGS) as Array<keyof typeof StateAnnotation>).map((k) => ({
      key: StateAnnotation[k],
      kind: 'annotation on the CRD, written by crd-migrator',
      meaning: STATE_MEANINGS[k],
    })),
    {
      key: 'crd-migrator.io/crd',
      kind: 'label on a built-in StorageVersionMigration crd-migrator created (`--engine builtin`)',
      meaning: 'the CRD the migration belongs to',
    },
    {
      key: 'crd-migrator.io/released-at',
      kind: 'annotation on a waiting built-in StorageVersionMigration',
      meaning:
        'written when a crd-migrator run ends, so kube-controller-manager starts the waiting migration at once instead of after its backoff',
    },
  ]
}
