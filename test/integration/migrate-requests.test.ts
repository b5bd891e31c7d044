/**
 * What one `migrate` of one CRD costs the API server in requests besides the rewrites
 * themselves (issue #37, item 1), counted by the API server itself: apiserver_request_total
 * before and after, on a control plane of this file's own (the shared one counts every
 * other test's requests too). A run of one page with no progress tick (a long progress
 * interval) freezes and unfreezes with one write each, narrows storedVersions with one,
 * records one Event, lists the API servers once, reads its CRD once and watches it without
 * a list: a change that adds a request per CRD fails here, whatever the machine's speed.
 */
import { randomBytes } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import t from 'tap'
import { pino } from 'pino'
import { countRequests, requestKey, requestsPerCrd, type RequestRow } from '../../dev/bench/apiserver-requests.js'
import { runMigrateCommand } from '../../src/cli/migrate/run-migrate.js'
import { loadConfig } from '../../src/config/load.js'
import { getCrd } from '../../src/kube/crds.js'
import { httpFor, storedVersionsInEtcd } from '../helpers/cluster.js'
import { startPrivateControlPlane } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'

const logger = pino({ level: 'silent' })
const OBJECTS = 20

/** The API server's own loops (identity Leases, the kubernetes Endpoints and EndpointSlice read by name): not the migrator's. */
const background = (row: RequestRow) =>
  row.resource === 'leases' || ((row.resource === 'endpoints' || row.resource === 'endpointslices') && row.verb !== 'LIST')

t.test(
  `one migrate of one CRD of ${OBJECTS} objects (one page): its requests besides the rewrites, counted by the API server`,
  async (t) => {
    const cp = await startPrivateControlPlane()
    const http = httpFor(cp.kubeconfigPath)
    t.teardown(() => http.close())
    const f = await crdWithObjects(http, { prefix: 'reqs', count: OBJECTS })
    const keyFile = join(t.testdir(), 'state.key')
    writeFileSync(keyFile, randomBytes(32).toString('base64'), { mode: 0o600 })
    const config = loadConfig({
      flags: {
        kubeconfig: cp.kubeconfigPath,
        'migrator.stateKeyFile': keyFile,
        // No tick of the state writer within the run: what is counted is what every run sends.
        'migrator.progressIntervalSeconds': 600,
      },
    })
    const out = new Writable({ write: (_c, _e, done) => done() })

    const counter = await countRequests(http)
    const code = await runMigrateCommand([f.name], config, logger, { dryRun: false, out, format: 'json' })
    const rows = await counter.stop()
    t.equal(code, 0, 'exit 0')
    t.same(
      Object.fromEntries(await storedVersionsInEtcd(cp, f.group, 'widgets')),
      { [`${f.group}/v2`]: OBJECTS },
      'every object at v2 in etcd',
    )
    const after = await getCrd(http, f.name)
    t.same(after.status?.storedVersions, ['v2'], 'storedVersions narrowed')

    const per = requestsPerCrd(rows, 1, { objects: 'widgets', background })
    const count = (key: string) => per.rows.filter((r) => requestKey(r) === key).reduce((n, r) => n + r.count, 0)
    const table = Object.fromEntries(per.rows.map((r) => [`${r.kind} ${requestKey(r)}`, r.count]))
    t.comment(`requests of the run: ${JSON.stringify(table)}`)

    t.equal(per.totals['object-write'], OBJECTS, 'one write per object', { table })
    t.ok(count('PATCH apiextensions.k8s.io/customresourcedefinitions') <= 2, 'at most 2 CRD writes: the freeze and the unfreeze', { table })
    t.equal(count('PATCH apiextensions.k8s.io/customresourcedefinitions/status'), 1, 'one storedVersions write', { table })
    t.ok(count('GET apiextensions.k8s.io/customresourcedefinitions') <= 1, 'the CRD read once, then carried', { table })
    t.ok(count('POST events.k8s.io/events') <= 1, 'one Event for the run (its start told in its end)', { table })
    t.equal(
      count('LIST apiextensions.k8s.io/customresourcedefinitions'),
      0,
      "the freeze guard watches from the freeze's revision, no list",
      {
        table,
      },
    )
    t.equal(count('WATCH apiextensions.k8s.io/customresourcedefinitions'), 1, 'one watch of the CRD', { table })
    t.ok(count('LIST discovery.k8s.io/endpointslices') <= 1, 'the API servers listed once for both storage checks', { table })
    // The lossless check's two views of the page before the freeze, the rewrite's list, the cleanup's list.
    t.ok(count('LIST (each)/widgets') <= 4, 'the objects listed at most 4 times (no second lossless check of a page already checked)', {
      table,
    })
    t.ok(per.totals.overhead <= 15, `at most 15 requests besides the objects' (${per.totals.overhead})`, { table })
  },
)
