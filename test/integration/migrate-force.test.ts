/**
 * `migrate --force` (cmctl's --skip-stored-version-check) against the real API server:
 * someone narrowed status.storedVersions to [v2] by hand while etcd still holds every
 * object at v1. A plain `migrate` trusts storedVersions and answers Skipped (etcd is read
 * to show it wrote nothing); `--force` rewrites every object under the freeze, etcd holds
 * them all at v2 afterwards, and storedVersions is [v2].
 */
import t from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { getCrd } from '../../src/kube/crds.js'
import { ContentType } from '../../src/kube/http.js'
import { crdPath } from '../../src/kube/paths.js'
import type { MigrationResult } from '../../src/migrator/migrate.js'
import { httpFor, storedVersionsInEtcd } from '../helpers/cluster.js'
import { getControlPlane } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'
import { runProcess } from '../helpers/run-process.js'

const COUNT = 150

t.test('--force rewrites objects stored at v1 although storedVersions was narrowed to [v2] by hand', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const { group, crd } = await crdWithObjects(http, { prefix: 'force', count: COUNT, flipTo: 'v2' })
  const name = crd.metadata.name
  t.same(crd.status?.storedVersions, ['v1', 'v2'], 'after the flip the API server lists both')
  // The hand edit cmctl's users make: storedVersions narrowed without rewriting anything.
  await http.request({
    method: 'PATCH',
    path: `${crdPath(name)}/status`,
    contentType: ContentType.mergePatch,
    body: { status: { storedVersions: ['v2'] } },
  })
  t.same((await getCrd(http, name)).status?.storedVersions, ['v2'], 'storedVersions narrowed by hand')
  const atV1 = { [`${group}/v1`]: COUNT }
  t.same(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')), atV1, 'etcd still holds every object at v1')

  const migrate = async (...flags: string[]) => {
    const r = await runProcess(process.execPath, [
      'dist/cli/main.js',
      'migrate',
      name,
      '--kubeconfig',
      cp.kubeconfigPath,
      '-o',
      'json',
      ...flags,
    ])
    return { ...r, results: r.code === 0 || r.code === 1 ? (JSON.parse(r.stdout) as MigrationResult[]) : [] }
  }

  const plain = await migrate()
  t.equal(plain.code, 0, 'migrate without --force', { stderr: plain.stderr })
  t.equal(plain.results[0]?.outcome, 'Skipped', 'trusts storedVersions: Skipped')
  t.equal(plain.results[0]?.skipReason, 'up-to-date')
  t.same(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')), atV1, 'etcd unchanged: nothing was rewritten')

  const dry = await migrate('--force', '--dry-run')
  t.equal(dry.code, 0, 'migrate --force --dry-run', { stderr: dry.stderr })
  t.match(dry.results[0], { objectsToRewrite: COUNT, storedVersionsAfter: ['v2'] }, '--dry-run says every object would be rewritten')
  t.same(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')), atV1, 'etcd unchanged by the dry run')

  const forced = await migrate('--force')
  t.equal(forced.code, 0, 'migrate --force', { stderr: forced.stderr })
  const result = forced.results[0]
  t.equal(result?.outcome, 'Succeeded', result?.reason ?? 'no result')
  t.equal(result?.storage?.counts.seen, COUNT, 'every object was walked')
  t.equal((result?.storage?.counts.rewritten ?? 0) + (result?.storage?.counts.conflict ?? 0), COUNT, 'every object was written anew')
  t.same(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')), { [`${group}/v2`]: COUNT }, 'etcd holds every object at v2')
  const after = await getCrd(http, name)
  t.same(after.status?.storedVersions, ['v2'], 'storedVersions [v2] at the end')
  t.notOk(DEFAULT_MIGRATING_ANNOTATION in (after.metadata.annotations ?? {}), 'the freeze is lifted')
})
