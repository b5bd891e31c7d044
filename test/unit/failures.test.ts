import t from 'tap'
import { CrdMigratorError } from '../../src/errors.js'
import { objectFailure, type WalkResult } from '../../src/migrator/engine/walker.js'
import { countByCode, failOnObjects, failOnStashes, ObjectsFailedError } from '../../src/migrator/phases/failures.js'

const counts = (failed: number) => ({ seen: 20, rewritten: 20 - failed, current: 0, skipped: 0, gone: 0, conflict: 0, failed, resumed: 0 })
const walk = (failures: WalkResult['failures'], failed = failures.length, conversionRefused?: number) => ({
  counts: counts(failed),
  failures,
  checkpoint: undefined,
  ...(conversionRefused === undefined ? {} : { conversionRefused }),
})
const refused = (key: string, message: string) => objectFailure(key, new CrdMigratorError('CRDM_CONVERSION_REFUSED', message))

t.test('failOnObjects: nothing failed, nothing thrown', async (t) => {
  t.doesNotThrow(() => failOnObjects(walk([]), 'could not be rewritten'))
})

t.test('failOnObjects: refusals alone are CRDM_CONVERSION_REFUSED, counted; the names and messages travel as data', async (t) => {
  const failures = [refused('team-b/payroll', 'spec.data["db-password=Hunter2!"] is not valid'), refused('ns/b', 'no')]
  const err = (() => {
    try {
      failOnObjects(walk(failures, 2, 2), 'could not be rewritten')
    } catch (e) {
      return e
    }
  })()
  t.type(err, ObjectsFailedError)
  t.match(err, {
    code: 'CRDM_CONVERSION_REFUSED',
    message:
      "the conversion webhook refused 2 object(s), which could not be rewritten; the others were migrated (the objects and their errors are in the migrator's log and in `crd-migrator migrate`'s output, with the webhook's messages)",
  })
  t.same((err as ObjectsFailedError).failures, failures, 'the failures, named, for the log')
  t.notMatch((err as Error).message, /team-b|payroll|Hunter2/, 'the public message names nobody and quotes no webhook')
})

t.test('failOnObjects: other failures (or a mix) are CRDM_OBJECTS_FAILED, counted by code', async (t) => {
  const failures = [
    objectFailure('ns/x', new CrdMigratorError('CRDM_KUBE_API', 'PATCH ...: 500 boom')),
    objectFailure('ns/z', new CrdMigratorError('CRDM_KUBE_API', 'PATCH ...: 422 no')),
    refused('ns/y', 'no'),
  ]
  t.throws(() => failOnObjects(walk(failures, 5, 1), 'kept managedFields of unserved versions'), {
    code: 'CRDM_OBJECTS_FAILED',
    message:
      "5 object(s) kept managedFields of unserved versions (2 CRDM_KUBE_API, 1 CRDM_CONVERSION_REFUSED, 2 more; the objects and their errors are in the migrator's log and in `crd-migrator migrate`'s output)",
  })
})

t.test('countByCode: most first, then by code; failures beyond those kept are "more"', async (t) => {
  const f = (code: 'CRDM_KUBE_API' | 'CRDM_FORBIDDEN') => objectFailure('k', new CrdMigratorError(code, 'm'))
  t.equal(countByCode([], 3), '3 more')
  t.equal(countByCode([f('CRDM_KUBE_API'), f('CRDM_FORBIDDEN'), f('CRDM_FORBIDDEN')], 3), '2 CRDM_FORBIDDEN, 1 CRDM_KUBE_API')
  t.equal(countByCode([f('CRDM_KUBE_API'), f('CRDM_FORBIDDEN')], 2), '1 CRDM_FORBIDDEN, 1 CRDM_KUBE_API')
})

t.test('failOnStashes: counted, named as data', async (t) => {
  const failures = [objectFailure('team-b/lonely', new CrdMigratorError('CRDM_STASH_FAILED', 'nothing points at it'))]
  t.throws(() => failOnStashes({ counts: { seen: 1, current: 0, migrated: 0, failed: 1, repointed: 0 }, failures, planned: [] }), {
    code: 'CRDM_STASH_FAILED',
    message: /^1 stashed copy not migrated \(/,
    failures,
  })
})

t.test('objectFailure: the code and message as data, the printed text beside them', async (t) => {
  t.strictSame(objectFailure('a', new CrdMigratorError('CRDM_CONVERSION_REFUSED', 'no')), {
    key: 'a',
    code: 'CRDM_CONVERSION_REFUSED',
    message: 'no',
    error: 'CRDM_CONVERSION_REFUSED: no',
  })
  t.equal(objectFailure('b', 'plain').code, 'CRDM_INTERNAL', 'anything else is internal')
})
