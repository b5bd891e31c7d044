/**
 * Checkpoints a resumed run may trust. The checkpoint on a frozen CRD says "every object
 * up to this key is stored in the storage version"; a resumed run skips those objects
 * and later narrows status.storedVersions. Anyone who could write that annotation could
 * make a run skip old-version objects, so a run writes an HMAC of the checkpoint next to
 * it (the seal), bound to the CRD's uid and to this freeze (target storage version,
 * frozen generation, start time), with a key only migrators hold. A checkpoint without a
 * valid seal is not trusted: the run walks every object again, and objects already in
 * the storage version cost a no-op request each, no etcd write.
 *
 * The key comes from `migrator.stateKeyFile` (the Helm chart mounts a Secret shared by
 * its replicas); without it, from a file in the user's state directory, created on first
 * use, so the same user's CLI resumes its own runs; where that cannot be written (a
 * read-only container), from memory, so only this process's own checkpoints are trusted.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import { link, mkdir, readFile, unlink, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import type { Logger } from 'pino'
import { CrdMigratorError, errorMessage } from '../errors.js'

/** What a seal is bound to: a checkpoint of another CRD or another freeze does not verify. */
export interface CheckpointBinding {
  crdUid: string
  targetStorageVersion: string
  frozenGeneration: number
  startedAt: string
}

const MIN_KEY_BYTES = 16
const DOMAIN = 'crd-migrator checkpoint v1'

export class CheckpointSeal {
  private constructor(
    private readonly key: Buffer,
    readonly source: string,
  ) {}

  static fromKey(key: Buffer, source: string): CheckpointSeal {
    if (key.length < MIN_KEY_BYTES)
      throw new CrdMigratorError(
        'CRDM_STATE_KEY',
        `the state key from ${source} has ${key.length} byte(s); it needs at least ${MIN_KEY_BYTES}`,
      )
    return new CheckpointSeal(key, source)
  }

  static ephemeral(): CheckpointSeal {
    return new CheckpointSeal(randomBytes(32), 'memory (this process only)')
  }

  seal(binding: CheckpointBinding, checkpoint: string): string {
    return createHmac('sha256', this.key)
      .update(
        [DOMAIN, binding.crdUid, binding.targetStorageVersion, String(binding.frozenGeneration), binding.startedAt, checkpoint].join('\n'),
      )
      .digest('base64url')
  }

  verify(binding: CheckpointBinding, checkpoint: string, seal: string | undefined): boolean {
    if (!seal) return false
    const expected = Buffer.from(this.seal(binding, checkpoint))
    const given = Buffer.from(seal)
    return expected.length === given.length && timingSafeEqual(expected, given)
  }
}

let processSeal: CheckpointSeal | undefined
/** The seal of callers that load no key (tests, the demo): trusted by this process only. */
export function processCheckpointSeal(): CheckpointSeal {
  processSeal ??= CheckpointSeal.ephemeral()
  return processSeal
}

export function defaultStateKeyFile(env: NodeJS.ProcessEnv = process.env): string {
  const stateHome = env['XDG_STATE_HOME'] || path.join(os.homedir(), '.local', 'state')
  return path.join(stateHome, 'crd-migrator', 'state.key')
}

/**
 * The seal for `stateKeyFile` when given (it must be readable: the operator asked for
 * it), else for the default file, created when missing, else one in memory.
 */
export async function loadCheckpointSeal(stateKeyFile: string | undefined, logger: Logger): Promise<CheckpointSeal> {
  if (stateKeyFile) {
    const key = await readFile(stateKeyFile).catch((err: NodeJS.ErrnoException) => {
      throw new CrdMigratorError(
        'CRDM_STATE_KEY',
        `cannot read the state key file ${stateKeyFile} (migrator.stateKeyFile): ${err.code ?? err.message}`,
        { cause: err },
      )
    })
    return CheckpointSeal.fromKey(trimKey(key), stateKeyFile)
  }
  const file = defaultStateKeyFile()
  try {
    return CheckpointSeal.fromKey(trimKey(await readFile(file)), file)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') return fallback(logger, file, err)
  }
  try {
    await mkdir(path.dirname(file), { recursive: true, mode: 0o700 })
    await publishKey(file)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') return fallback(logger, file, err)
  }
  try {
    return CheckpointSeal.fromKey(trimKey(await readFile(file)), file)
  } catch (err) {
    return fallback(logger, file, err)
  }
}

/**
 * Creates `file` holding a new key, whole or not at all: the key is written to a file of
 * its own, then hard-linked to the name, which fails with EEXIST when another process got
 * there first. Creating the name itself with O_EXCL and writing into it left a moment in
 * which a second process starting at once read an empty key and fell back to one in memory.
 */
async function publishKey(file: string): Promise<void> {
  const temporary = `${file}.${process.pid}.${randomBytes(6).toString('hex')}`
  await writeFile(temporary, randomBytes(32).toString('base64url'), { mode: 0o600, flag: 'wx' })
  try {
    await link(temporary, file)
  } finally {
    await unlink(temporary).catch(() => {})
  }
}

function fallback(logger: Logger, file: string, err: unknown): CheckpointSeal {
  logger.info(
    { file, err: errorMessage(err) },
    'no state key file (set migrator.stateKeyFile); checkpoints written by other processes will be re-verified object by object',
  )
  return CheckpointSeal.ephemeral()
}

/** A key file written by hand or from a Secret may end in a newline; it is not key material. */
function trimKey(key: Buffer): Buffer {
  let end = key.length
  while (end > 0 && (key[end - 1] === 0x0a || key[end - 1] === 0x0d)) end--
  return key.subarray(0, end)
}
