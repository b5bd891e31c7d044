/**
 * `check --manifests` with custom resources, through the built CLI against the real API
 * server: a GitOps folder whose CRD drops v1 while a Widget in it is still written at v1
 * (exit 3, the Widget listed in text and -o json); `--fix --dry-run` prints the diff and
 * writes nothing; `--fix` rewrites the document in place (comments and the other
 * documents kept; the API server accepts the result), and a second check says 0. A
 * folder of custom resources alone, with --drop, finds their CRD in the cluster; a
 * webhook-converted CRD's resources are refused by --fix, the file untouched.
 */
import { readFile } from 'node:fs/promises'
import { spawnSync } from 'node:child_process'
import { join, relative } from 'node:path'
import t from 'tap'
import { parseAllDocuments, stringify } from 'yaml'
import type { CheckReport } from '../../src/cli/check/run-check.js'
import { EXIT_NOT_SAFE } from '../../src/cli/check/run-check.js'
import { ContentType } from '../../src/kube/http.js'
import { migrateCrd } from '../../src/migrator/migrate.js'
import { pino } from 'pino'
import { crdManifest, createNamespace, defaultSettings, httpFor } from '../helpers/cluster.js'
import { getControlPlane, uniqueGroup, uniqueName } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'
import { runProcess } from '../helpers/run-process.js'

const logger = pino({ level: 'silent' })

t.test('custom resources at the dropped version block; --fix moves them; the check then passes', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const { group, crd, ns } = await crdWithObjects(http, { prefix: 'mfix', count: 5, flipTo: 'v2', unserved: ['v1'] })
  const name = crd.metadata.name
  // The cluster side is done: v1 no longer served, migrated (managedFields at v1 moved too). Only the files are left.
  t.equal((await migrateCrd(name, defaultSettings(), { http, logger, owner: 'check-manifests-test' })).outcome, 'Succeeded')

  const app = [
    `# widgets of team ${ns}\napiVersion: ${group}/v1 # still the old version\nkind: Widget\nmetadata:\n  name: old\n  namespace: ${ns}\nspec:\n  replicas: 2 # two\n`,
    `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: ${ns}\ndata:\n  mode: "fast"\n`,
    `apiVersion: ${group}/v2\nkind: Widget\nmetadata:\n  name: new\n  namespace: ${ns}\n`,
  ].join('---\n')
  const dir = t.testdir({
    'crds.yaml': stringify(crdManifest({ group, versions: ['v2'], storage: 'v2' })),
    'app.yaml': app,
    templates: { 'widget.yaml': `apiVersion: ${group}/v1\nkind: Widget\nmetadata:\n  name: {{ .Release.Name }}\n` },
  })
  const appFile = join(dir, 'app.yaml')
  const cli = (...args: string[]) => runProcess(process.execPath, ['dist/cli/main.js', 'check', ...args, '--kubeconfig', cp.kubeconfigPath])

  const text = await cli('--manifests', dir)
  t.equal(text.code, EXIT_NOT_SAFE, 'exit 3: the Widget at v1 fails to apply once v1 is gone', { stdout: text.stdout, stderr: text.stderr })
  t.match(text.stdout, `${name}: drop v1? NO`)
  t.match(
    text.stdout,
    new RegExp(
      `no {2}manifests +1 custom resource\\(s\\) in the manifests are written at ${group.replace(/\./g, '\\.')}/v1 and fail to apply once v1 is gone: ${appFile.replace(/[./]/g, '\\$&')} \\[0\\] Widget ${ns}/old`,
    ),
  )
  t.match(text.stdout, `skipped ${join(dir, 'templates', 'widget.yaml')}: a template`, 'the template is skipped with a note')
  const json = await cli('--manifests', dir, '-o', 'json')
  t.equal(json.code, EXIT_NOT_SAFE)
  const report = JSON.parse(json.stdout) as CheckReport
  t.match(report.resources, [
    { file: appFile, documentIndex: 0, kind: 'Widget', namespace: ns, name: 'old', apiVersion: `${group}/v1`, crd: name, version: 'v1' },
  ])
  t.equal(report.resources?.length, 1, 'only the Widget at v1: not the ConfigMap, not the Widget at v2, not the template')
  t.equal(report.skipped?.length, 1)

  const dry = await cli('--manifests', dir, '--fix', '--dry-run')
  t.equal(dry.code, EXIT_NOT_SAFE, '--dry-run: still blocked, nothing written', { stderr: dry.stderr })
  const relFile = relative(process.cwd(), appFile)
  t.match(
    dry.stdout,
    new RegExp(`^--- a/${relFile.replace(/[./]/g, '\\$&')}\n\\+\\+\\+ b/`),
    'stdout is a unified diff, paths relative to here',
  )
  t.match(dry.stdout, `\n-apiVersion: ${group}/v1 # still`)
  t.match(dry.stderr, /would fix 1 of 1 document\(s\); nothing written/, 'what the diff does not say goes to stderr')
  t.match(dry.stderr, `${name}: drop v1? NO`)
  t.equal(await readFile(appFile, 'utf8'), app, 'the file is untouched')
  const check = spawnSync('git', ['apply', '--check', '--verbose', '-'], { input: dry.stdout, encoding: 'utf8' })
  t.equal(check.status, 0, 'git apply takes the diff as it is', { stderr: check.stderr })

  const fix = await cli('--manifests', dir, '--fix')
  t.equal(fix.code, 0, '--fix: nothing blocks once the Widget is moved', { stdout: fix.stdout, stderr: fix.stderr })
  t.match(fix.stdout, /fixed 1 of 1 document\(s\)/)
  const fixed = await readFile(appFile, 'utf8')
  t.equal(
    fixed,
    app.replace(`apiVersion: ${group}/v1 # still`, `apiVersion: ${group}/v2 # still`),
    'only that apiVersion changed: comments and documents kept',
  )
  // The API server takes the fixed document as it is (server-side dry run).
  const widget = parseAllDocuments(fixed)[0]!.toJS() as object
  const created = await http.request({
    method: 'POST',
    path: `/apis/${group}/v2/namespaces/${ns}/widgets?dryRun=All`,
    body: widget,
    contentType: ContentType.json,
  })
  t.equal(created.status, 201, 'the fixed Widget is accepted through v2')

  const again = await cli('--manifests', dir)
  t.equal(again.code, 0, 'the folder can be applied now', { stdout: again.stdout })

  // Custom resources alone: with --drop, their CRD is found in the cluster.
  const only = t.testdir({ 'w.yaml': `apiVersion: ${group}/v1\nkind: Widget\nmetadata:\n  name: lone\n  namespace: ${ns}\n` })
  const alone = await cli('--manifests', only, '--drop', 'v1', '-o', 'json')
  t.equal(alone.code, EXIT_NOT_SAFE, 'exit 3', { stderr: alone.stderr })
  const aloneReport = JSON.parse(alone.stdout) as CheckReport
  t.match(aloneReport.results, [{ crd: name, version: 'v1', safe: false }], 'the cluster CRD is checked for v1')
  t.match(aloneReport.resources, [{ name: 'lone', crd: name }])
  const noDrop = await cli('--manifests', only)
  t.equal(noDrop.code, 2, 'without --drop and without a CRD: usage error', { stderr: noDrop.stderr })
  t.match(noDrop.stderr, /CRDM_CONFIG_INVALID: --manifests: no CustomResourceDefinition/)
  const dryAlone = await cli('--manifests', only, '--dry-run')
  t.equal(dryAlone.code, 2, '--dry-run without --fix: usage error')

  // kubectl get -o yaml writes a kind: List; kubectl apply takes it, so its items count.
  const listed = t.testdir({
    'list.yaml': stringify({
      apiVersion: 'v1',
      kind: 'List',
      items: [{ apiVersion: `${group}/v1`, kind: 'Widget', metadata: { name: 'in-list', namespace: ns } }],
    }),
  })
  const list = await cli('--manifests', listed, '--drop', 'v1', '-o', 'json')
  t.equal(list.code, EXIT_NOT_SAFE, 'a Widget at v1 inside a kind: List blocks too', { stderr: list.stderr })
  t.match((JSON.parse(list.stdout) as CheckReport).resources, [{ name: 'in-list', documentIndex: 0, itemPath: [0], crd: name }])
  const listFix = await cli('--manifests', listed, '--drop', 'v1', '--fix')
  t.equal(listFix.code, 0, '--fix moves the item', { stdout: listFix.stdout, stderr: listFix.stderr })
  t.match(await readFile(join(listed, 'list.yaml'), 'utf8'), `apiVersion: ${group}/v2`)
})

t.test('--fix refuses custom resources of a webhook-converted CRD, and leaves the file alone', async (t) => {
  const cp = await getControlPlane()
  const group = uniqueGroup('mhook')
  const ns = uniqueName('mhook')
  await createNamespace(httpFor(cp.kubeconfigPath), ns)
  const crd = crdManifest({ group, versions: ['v2'], storage: 'v2' })
  crd.spec.conversion = {
    strategy: 'Webhook',
    webhook: { conversionReviewVersions: ['v1'], clientConfig: { url: 'https://127.0.0.1:1/convert' } },
  }
  const widget = `apiVersion: ${group}/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: ${ns}\n`
  const dir = t.testdir({ 'crds.yaml': stringify(crd), 'w.yaml': widget })
  const r = await runProcess(process.execPath, [
    'dist/cli/main.js',
    'check',
    '--manifests',
    dir,
    '--fix',
    '--kubeconfig',
    cp.kubeconfigPath,
  ])
  t.equal(r.code, EXIT_NOT_SAFE, 'still blocked', { stdout: r.stdout, stderr: r.stderr })
  t.match(r.stdout, /not fixed: .*Widget .*\/w \(.*\/v1\): .* converts between versions with a webhook, which cannot be run offline/)
  t.match(r.stdout, /fixed 0 of 1 document\(s\); 1 not fixed/)
  t.equal(await readFile(join(dir, 'w.yaml'), 'utf8'), widget, 'the file is untouched')
})
