import t from 'tap'
import { CrdMigratorError } from '../../src/errors.js'
import { objectFailure, type WalkResult } from '../../src/migrator/engine/walker.js'
import { failOnObjects } from '../../src/migrator/phases/failures.js'

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

t.test('failOnObjects: refusals are named by code, with the webhook’s own message', async (t) => {
  const failures = [refused('ns/a', 'spec.image is not valid'), refused('ns/b', 'no')]
  t.throws(() => failOnObjects(walk(failures, 2, 2), 'could not be rewritten'), {
    code: 'CRDM_CONVERSION_REFUSED',
    message:
      'the conversion webhook refused 2 object(s), which could not be rewritten: ns/a (spec.image is not valid); ns/b (no); the others were migrated',
  })
})

t.test('failOnObjects: ten named, the rest counted', async (t) => {
  const failures = Array.from({ length: 12 }, (_, i) => refused(`ns/o${i}`, 'no'))
  t.throws(() => failOnObjects(walk(failures, 15, 15), 'could not be rewritten'), { message: /ns\/o9 \(no\), and 5 more; the others/ })
})

t.test('failOnObjects: other failures (or a mix) are CRDM_OBJECTS_FAILED with the first one', async (t) => {
  const failures = [objectFailure('ns/x', new CrdMigratorError('CRDM_KUBE_API', 'PATCH ...: 500 boom')), refused('ns/y', 'no')]
  t.throws(() => failOnObjects(walk(failures, 2, 1), 'kept managedFields of unserved versions'), {
    code: 'CRDM_OBJECTS_FAILED',
    message: '2 object(s) kept managedFields of unserved versions, e.g. ns/x: CRDM_KUBE_API: PATCH ...: 500 boom',
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
