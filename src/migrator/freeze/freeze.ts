/** Setting, taking over and lifting the freeze, with each step's retries; what is written is state/crd-record.ts's. */
import { getCrd } from '../../kube/crds.js'
import { isNotFound } from '../../kube/api-errors.js'
import type { CustomResourceDefinition } from '../../kube/types.js'
import { readCrdState, type FreezeVerdict, type RunOutcome } from '../../state/crd-state.js'
import { writeFreeze, writeTakeOver, writeUnfreeze } from '../../state/crd-record.js'
import { type CheckpointBinding, type CheckpointSeal } from './checkpoint-seal.js'
import type { MigrationContext, MigrationSettings, RunContext } from '../context.js'
import { UNFREEZE_RETRY } from '../engine/retry.js'
import { RunClient } from '../engine/run-client.js'

export interface Frozen {
  /** The CRD as the freeze left it. */
  crd: CustomResourceDefinition
  frozenGeneration: number
  /** What the checkpoints of this freeze are bound to (undefined: none can be sealed). */
  binding: CheckpointBinding | undefined
  /** The checkpoint to resume after: only one whose seal verifies. */
  resumeAfter: string | undefined
  /** A checkpoint found on the CRD whose seal does not verify; every object is looked at again. */
  unverifiedCheckpoint: string | undefined
}

/**
 * Freezes the CRD (verdict 'freeze'), or takes over a freeze of ours (verdict 'resume').
 * Both carry the resourceVersion the verdict was taken on: a CRD that changed meanwhile
 * gets a 409, and the run stops before it starts.
 */
export async function freezeCrd(
  crd: CustomResourceDefinition,
  verdict: Extract<FreezeVerdict, { action: 'freeze' | 'resume' }>,
  storageVersion: string,
  settings: MigrationSettings,
  ctx: RunContext,
  seal: CheckpointSeal,
): Promise<Frozen> {
  const frozen =
    verdict.action === 'resume'
      ? await writeTakeOver(ctx.client, crd, ctx.owner)
      : await writeFreeze(ctx.client, crd, settings.migratingAnnotation, ctx.owner, storageVersion)
  const state = readCrdState(frozen, settings.migratingAnnotation)
  const frozenGeneration = state.frozenGeneration ?? crd.metadata.generation ?? 0
  const { uid } = frozen.metadata
  const binding: CheckpointBinding | undefined =
    uid && state.frozenGeneration !== undefined && state.startedAt
      ? { crdUid: uid, targetStorageVersion: storageVersion, frozenGeneration: state.frozenGeneration, startedAt: state.startedAt }
      : undefined
  let resumeAfter: string | undefined
  let unverifiedCheckpoint: string | undefined
  if (verdict.action === 'resume' && verdict.checkpoint !== undefined) {
    if (binding && seal.verify(binding, verdict.checkpoint, state.checkpointSeal)) resumeAfter = verdict.checkpoint
    else unverifiedCheckpoint = verdict.checkpoint
  }
  return { crd: frozen, frozenGeneration, binding, resumeAfter, unverifiedCheckpoint }
}

/**
 * Lifts the freeze and records the outcome: whether it is gone, with the CRD the patch got back
 * (for the final Event, so no read after it), or why not.
 */
export async function unfreezeCrd(
  name: string,
  run: RunOutcome,
  settings: MigrationSettings,
  ctx: MigrationContext,
): Promise<{ lifted: true; crd?: CustomResourceDefinition } | { lifted: false; error: unknown }> {
  try {
    // The patch is made at each try: it records when the freeze was lifted.
    const unfreezing = new RunClient(ctx.http, UNFREEZE_RETRY)
    const crd = await unfreezing.retry(() => writeUnfreeze(ctx.http, name, settings.migratingAnnotation, run))
    return { lifted: true, crd }
  } catch (err) {
    if (isNotFound(err)) return { lifted: true }
    ctx.logger.error({ crd: name, err }, 'could not remove the migrating annotation; the CRD stays frozen until a later run resumes it')
    return { lifted: false, error: err }
  }
}

/** The CRD as it is now, for the final Event; the last known copy when it cannot be read. */
export async function latestCrd(crd: CustomResourceDefinition, ctx: MigrationContext): Promise<CustomResourceDefinition> {
  return getCrd(ctx.http, crd.metadata.name).catch(() => crd)
}
