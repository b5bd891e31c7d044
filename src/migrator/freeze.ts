import { MIGRATING_VALUE, StateAnnotation } from '../config/annotations.js'
import type { CustomResourceDefinition } from '../kube/types.js'

/** What the annotations of a CRD say about a freeze. */
export interface FreezeState {
  frozen: boolean
  /** Set when the freeze is ours (a crd-migrator run wrote its owner annotation). */
  owner: string | undefined
  heartbeat: Date | undefined
  targetStorageVersion: string | undefined
  frozenGeneration: number | undefined
  startedAt: string | undefined
  checkpoint: string | undefined
  checkpointSeal: string | undefined
}

export function readFreezeState(crd: CustomResourceDefinition, migratingAnnotation: string): FreezeState {
  const a = crd.metadata.annotations ?? {}
  const heartbeat = a[StateAnnotation.heartbeat] ? new Date(a[StateAnnotation.heartbeat]!) : undefined
  const generation = a[StateAnnotation.frozenGeneration] ? Number(a[StateAnnotation.frozenGeneration]) : undefined
  return {
    frozen: a[migratingAnnotation] === MIGRATING_VALUE,
    owner: a[StateAnnotation.owner] || undefined,
    heartbeat: heartbeat && !Number.isNaN(heartbeat.getTime()) ? heartbeat : undefined,
    targetStorageVersion: a[StateAnnotation.targetStorageVersion] || undefined,
    frozenGeneration: Number.isFinite(generation) ? generation : undefined,
    startedAt: a[StateAnnotation.startedAt] || undefined,
    checkpoint: a[StateAnnotation.checkpoint] || undefined,
    checkpointSeal: a[StateAnnotation.checkpointSeal] || undefined,
  }
}

export type FreezeVerdict =
  | { action: 'freeze' }
  | { action: 'resume'; checkpoint: string | undefined; previousOwner: string }
  | { action: 'wait'; reason: string }
  | { action: 'foreign'; reason: string }

/**
 * Decides what to do with a CRD that may already be frozen: a freeze without our owner
 * annotation belongs to another tool and is never touched; ours is resumed once its owner
 * stopped heart-beating (a crashed or evicted run), or straight away when it is our own
 * identity (the same replica restarted).
 */
export function decideFreeze(state: FreezeState, self: string, storageVersion: string, takeoverAfterMs: number, now = new Date()): FreezeVerdict {
  if (!state.frozen) return { action: 'freeze' }
  if (!state.owner) return { action: 'foreign', reason: 'the CRD carries the migrating annotation but no crd-migrator owner: another migrator froze it' }
  const age = state.heartbeat ? now.getTime() - state.heartbeat.getTime() : Number.POSITIVE_INFINITY
  if (state.owner !== self && age < takeoverAfterMs) {
    return { action: 'wait', reason: `migration in progress by ${state.owner} (heartbeat ${Math.round(age / 1000)}s ago)` }
  }
  const checkpoint = state.targetStorageVersion === storageVersion ? state.checkpoint : undefined
  return { action: 'resume', checkpoint, previousOwner: state.owner }
}

export function freezeAnnotations(
  migratingAnnotation: string,
  owner: string,
  storageVersion: string,
  generation: number,
  now = new Date(),
): Record<string, string | null> {
  return {
    [migratingAnnotation]: MIGRATING_VALUE,
    [StateAnnotation.owner]: owner,
    [StateAnnotation.heartbeat]: now.toISOString(),
    [StateAnnotation.phase]: 'Started',
    [StateAnnotation.startedAt]: now.toISOString(),
    [StateAnnotation.targetStorageVersion]: storageVersion,
    [StateAnnotation.frozenGeneration]: String(generation),
    [StateAnnotation.progress]: null,
    // A fresh freeze starts from the beginning: a checkpoint left on the CRD (by hand, or
    // by a run of another storage version) must never make this run skip objects.
    [StateAnnotation.checkpoint]: null,
    [StateAnnotation.checkpointSeal]: null,
  }
}
