/**
 * Annotation keys written on CustomResourceDefinitions. The migrating key is the one
 * KEP-2855 defines; it is configurable so a cluster running another KEP-2855 migrator
 * can keep the two apart. Everything else lives under our own prefix.
 */
export const DEFAULT_MIGRATING_ANNOTATION = 'ksvm.sigs.k8s.io/migrating'
export const MIGRATING_VALUE = 'true'

export const STATE_PREFIX = 'crd-migrator.io/'

export const StateAnnotation = {
  /** Opt-in marker for the controller's default selector. */
  managed: `${STATE_PREFIX}managed`,
  phase: `${STATE_PREFIX}phase`,
  progress: `${STATE_PREFIX}progress`,
  startedAt: `${STATE_PREFIX}started-at`,
  targetStorageVersion: `${STATE_PREFIX}target-storage-version`,
  frozenGeneration: `${STATE_PREFIX}frozen-generation`,
  owner: `${STATE_PREFIX}owner`,
  heartbeat: `${STATE_PREFIX}heartbeat`,
  checkpoint: `${STATE_PREFIX}checkpoint`,
  /** HMAC of the checkpoint, so a resumed run trusts only checkpoints a migrator wrote. */
  checkpointSeal: `${STATE_PREFIX}checkpoint-seal`,
  lastResult: `${STATE_PREFIX}last-result`,
  lastCounts: `${STATE_PREFIX}last-counts`,
  lastDuration: `${STATE_PREFIX}last-duration`,
  observedGeneration: `${STATE_PREFIX}observed-generation`,
  finishedAt: `${STATE_PREFIX}finished-at`,
} as const

/** Default identity of the migrator: the ServiceAccount the Helm chart deploys. */
export const DEFAULT_MIGRATOR_USERS = ['system:serviceaccount:crd-migrator:crd-migrator']
export const DEFAULT_BREAK_GLASS_GROUPS = ['system:masters']
