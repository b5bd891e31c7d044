/**
 * `check --manifests`'s reading of files (CRDs and custom resources, multi-document files,
 * templates skipped), the matching of custom resources against the versions dropped, and
 * `--fix`'s in-place rewrite (comments, quoting, other documents kept byte for byte).
 */
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import t from 'tap'
import { parseManifests, readManifests, skipReason } from '../../src/check/manifests.js'
import {
  blockingResources,
  describeResource,
  splitApiVersion,
  withResourceReasons,
  type BlockingResource,
  type VersionGate,
} from '../../src/check/manifest-resources.js'
import { applyFixes, formatFixes, planFixes, rewriteApiVersions, unifiedDiff } from '../../src/check/manifest-fix.js'
import { ConfigError } from '../../src/errors.js'

const CRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {plural: widgets, kind: Widget}
  scope: Namespaced
  versions:
    - {name: v2, served: true, storage: true}
`

const MULTI = `# The app's widgets.
apiVersion: example.com/v1   # old version, on purpose
kind: Widget
metadata:
  name: a
  namespace: team-a
spec:
  replicas: 3 # three
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cm}
data:
  x: "1"
---
# second widget, already moved
apiVersion: "example.com/v2"
kind: Widget
metadata:
  name: b
---
apiVersion: 'example.com/v1'
kind: Widget
metadata:
  name: c
`

const gate = (over: Partial<VersionGate> = {}): VersionGate => ({
  crd: 'widgets.example.com',
  group: 'example.com',
  kind: 'Widget',
  dropped: ['v1'],
  listed: ['v2'],
  storageVersion: 'v2',
  conversion: 'None',
  ...over,
})

t.test('parseManifests: the items of a list document (kind: List, nested lists too) are resources, each with its place', async (t) => {
  const text = `apiVersion: v1
kind: List
items:
  - apiVersion: example.com/v1
    kind: Widget
    metadata: {name: a, namespace: ns}
  - apiVersion: v1
    kind: ConfigMapList
    items:
      - apiVersion: example.com/v1
        kind: Widget
        metadata: {name: b}
  - apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata: {name: gadgets.example.com}
    spec: {group: example.com, names: {kind: Gadget}, versions: [{name: v1, storage: true}]}
`
  const parsed = parseManifests(text, 'l.yaml')
  t.same(
    parsed.resources.map((r) => [r.documentIndex, r.itemPath, r.name]),
    [
      [0, [0], 'a'],
      [0, [1, 0], 'b'],
    ],
  )
  t.match(parsed.crds, [{ name: 'gadgets.example.com', versions: ['v1'] }], 'a CRD in a list is a CRD')
  t.equal(describeResource(parsed.resources[1]!), 'l.yaml [0].items[1].items[0] Widget b')
  const rewritten = rewriteApiVersions(text, [{ documentIndex: 0, itemPath: [1, 0], apiVersion: 'example.com/v2' }], 'l.yaml')
  t.equal(
    rewritten.text,
    text.replace('      - apiVersion: example.com/v1', '      - apiVersion: example.com/v2'),
    'the item is rewritten in place',
  )
  t.same(
    rewritten.changes.map((c) => c.line),
    [10],
  )
})

t.test('unifiedDiff: context merged between close changes, the last line without a newline marked', async (t) => {
  const before = 'a\nb\nc\nd\ne\nf\ng\nh\ni'
  const after = 'a\nB\nc\nd\ne\nf\ng\nh\nI'
  t.equal(
    unifiedDiff('x.yaml', before, after),
    '--- a/x.yaml\n+++ b/x.yaml\n@@ -1,9 +1,9 @@\n a\n-b\n+B\n c\n d\n e\n f\n g\n h\n-i\n\\ No newline at end of file\n+I\n\\ No newline at end of file\n',
  )
  t.equal(unifiedDiff('x.yaml', 'same\n', 'same\n'), '', 'nothing changed: no diff')
})

t.test('parseManifests: CRDs and resources of a multi-document file, each with its index', async (t) => {
  const parsed = parseManifests(`${CRD}---\n${MULTI}`, 'f.yaml')
  t.match(parsed.crds, [
    { name: 'widgets.example.com', group: 'example.com', kind: 'Widget', versions: ['v2'], storage: 'v2', conversion: 'None' },
  ])
  t.same(
    parsed.resources.map((r) => [r.documentIndex, r.apiVersion, r.kind, r.namespace, r.name]),
    [
      [1, 'example.com/v1', 'Widget', 'team-a', 'a'],
      [3, 'example.com/v2', 'Widget', undefined, 'b'],
      [4, 'example.com/v1', 'Widget', undefined, 'c'],
    ],
    'core resources (apiVersion v1) and the CRD are not custom resources',
  )
  t.throws(() => parseManifests('a: [', 'bad.yaml'), ConfigError, 'not YAML: a usage error')
  const webhook = parseManifests(CRD.replace('scope:', 'conversion: {strategy: Webhook}\n  scope:'), 'w.yaml')
  t.equal(webhook.crds[0]?.conversion, 'Webhook')
})

t.test('templates are skipped with a note; a folder of resources alone needs --drop', async (t) => {
  t.equal(skipReason(MULTI), undefined)
  t.match(skipReason('apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {{ .Release.Name }}\n'), /template/)
  const dir = t.testdir({
    'crds.yaml': CRD,
    templates: { 'widget.yaml': 'apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {{ .Values.name }}\n' },
    'app.yaml': MULTI,
    'notes.txt': 'not read',
  })
  const read = readManifests([dir])
  t.same(
    read.skipped.map((s) => s.file),
    [join(dir, 'templates', 'widget.yaml')],
    'the template is skipped, not parsed',
  )
  t.equal(read.resources.length, 3)
  const onlyResources = t.testdir({ 'app.yaml': MULTI })
  t.throws(() => readManifests([onlyResources]), /no CustomResourceDefinition .*with --drop VERSION/)
  t.equal(readManifests([onlyResources], true).resources.length, 3, 'with --drop, custom resources alone are checked')
})

t.test('blockingResources: at a dropped version, or at one the CRD about to be applied does not list', async (t) => {
  const resources = parseManifests(MULTI, 'app.yaml').resources
  const rows: Array<[string, VersionGate[], Array<[number, string]>]> = [
    [
      'v1 dropped',
      [gate()],
      [
        [0, 'dropped'],
        [3, 'dropped'],
      ],
    ],
    ['no gate for the kind', [gate({ kind: 'Gadget' })], []],
    ['another group', [gate({ group: 'example.org' })], []],
    [
      'nothing dropped, v1 not listed',
      [gate({ dropped: [] })],
      [
        [0, 'unlisted'],
        [3, 'unlisted'],
      ],
    ],
    ['nothing dropped, no manifest CRD (cluster gate)', [gate({ dropped: [], listed: undefined })], []],
    ['v2 dropped from a cluster CRD', [gate({ dropped: ['v2'], listed: undefined })], [[2, 'dropped']]],
  ]
  for (const [name, gates, want] of rows)
    t.same(
      blockingResources(resources, gates).map((b) => [b.documentIndex, b.cause]),
      want,
      name,
    )
  t.same(splitApiVersion('example.com/v1'), { group: 'example.com', version: 'v1' })
  t.same(splitApiVersion('v1'), { group: '', version: 'v1' })
})

t.test('withResourceReasons: a blocking manifests reason on the verdict of that CRD and version, or one of its own', async (t) => {
  const blocking = blockingResources(parseManifests(MULTI, 'app.yaml').resources, [gate()])
  const safe = {
    crd: 'widgets.example.com',
    version: 'v1',
    safe: true,
    reasons: [{ check: 'storedVersions' as const, status: 'ok' as const, message: 'ok' }],
  }
  const [v] = withResourceReasons([safe], blocking)
  t.equal(v?.safe, false, 'not safe any more')
  t.match(v?.reasons[1], {
    check: 'manifests',
    status: 'blocks',
    message: /^2 custom resource\(s\) .* fail to apply once v1 is gone: app\.yaml \[0\] Widget team-a\/a; app\.yaml \[3\] Widget c/,
  })
  t.equal(safe.safe, true, 'the input is not changed')
  const own = withResourceReasons([], blocking)
  t.match(own, [{ crd: 'widgets.example.com', version: 'v1', safe: false, reasons: [{ check: 'manifests' }] }])
  t.same(withResourceReasons([safe], []), [safe], 'nothing blocking: the verdicts as they were')
})

t.test('planFixes: conversion None moves to the storage version; Webhook and no other version are refused', async (t) => {
  const blocking = blockingResources(parseManifests(MULTI, 'app.yaml').resources, [gate()])
  t.match(planFixes(blocking, [gate()]), [{ to: 'example.com/v2' }, { to: 'example.com/v2' }])
  t.match(planFixes(blocking, [gate({ conversion: 'Webhook' })]), [{ refused: /webhook, which cannot be run offline.*by hand/ }, {}])
  t.match(planFixes(blocking, [gate({ storageVersion: undefined })]), [{ refused: /no storage version/ }, {}])
  const atStorage: BlockingResource[] = [{ ...blocking[0]!, version: 'v2', apiVersion: 'example.com/v2' }]
  t.match(planFixes(atStorage, [gate()]), [{ refused: /v2 is the storage version/ }])
})

t.test('rewriteApiVersions: only the apiVersion values change; comments, quoting and other documents stay', async (t) => {
  const { text, changes } = rewriteApiVersions(
    MULTI,
    [
      { documentIndex: 0, apiVersion: 'example.com/v2' },
      { documentIndex: 3, apiVersion: 'example.com/v2' },
    ],
    'app.yaml',
  )
  t.equal(
    text,
    MULTI.replace('apiVersion: example.com/v1   # old', 'apiVersion: example.com/v2   # old').replace(
      "apiVersion: 'example.com/v1'",
      "apiVersion: 'example.com/v2'",
    ),
    'byte for byte the same but the two values',
  )
  t.same(changes, [
    {
      documentIndex: 0,
      line: 2,
      before: 'apiVersion: example.com/v1   # old version, on purpose',
      after: 'apiVersion: example.com/v2   # old version, on purpose',
    },
    { documentIndex: 3, line: 22, before: "apiVersion: 'example.com/v1'", after: "apiVersion: 'example.com/v2'" },
  ])
  const json = '{\n  "apiVersion": "example.com/v1",\n  "kind": "Widget",\n  "metadata": {"name": "j"}\n}\n'
  t.equal(
    rewriteApiVersions(json, [{ documentIndex: 0, apiVersion: 'example.com/v2' }], 'j.json').text,
    json.replace('/v1', '/v2'),
    'JSON stays JSON',
  )
  t.throws(
    () => rewriteApiVersions('kind: Widget\n', [{ documentIndex: 0, apiVersion: 'example.com/v2' }], 'x.yaml'),
    /no apiVersion scalar/,
  )
  t.throws(
    () =>
      rewriteApiVersions(
        'apiVersion: >-\n  example.com/v1\nkind: Widget\n',
        [{ documentIndex: 0, apiVersion: 'example.com/v2' }],
        'x.yaml',
      ),
    /BLOCK_FOLDED scalar; rewrite it by hand/,
  )
})

t.test('applyFixes: --dry-run writes nothing; --fix writes the file; refusals keep the file', async (t) => {
  const dir = t.testdir({ 'app.yaml': MULTI, 'crds.yaml': CRD })
  const file = join(dir, 'app.yaml')
  const blocking = blockingResources(readManifests([dir]).resources, [gate()])
  const dry = await applyFixes(planFixes(blocking, [gate()]), true, dir)
  t.same(
    dry.outcomes.map((o) => o.status),
    ['would-fix', 'would-fix'],
  )
  t.equal(await readFile(file, 'utf8'), MULTI, 'dry run: the file is untouched')
  t.equal(
    dry.patch,
    [
      '--- a/app.yaml',
      '+++ b/app.yaml',
      '@@ -1,5 +1,5 @@',
      " # The app's widgets.",
      '-apiVersion: example.com/v1   # old version, on purpose',
      '+apiVersion: example.com/v2   # old version, on purpose',
      ' kind: Widget',
      ' metadata:',
      '   name: a',
      '@@ -19,7 +19,7 @@',
      ' metadata:',
      '   name: b',
      ' ---',
      "-apiVersion: 'example.com/v1'",
      "+apiVersion: 'example.com/v2'",
      ' kind: Widget',
      ' metadata:',
      '   name: c',
      '',
    ].join('\n'),
    'a unified diff with 3 lines of context, paths relative to where it runs',
  )
  t.match(
    formatFixes(dry.outcomes, true),
    /^would fix 2 of 2 document\(s\); nothing written \(the diff is on stdout: git apply takes it\)\n$/,
  )

  const refused = await applyFixes(planFixes(blocking, [gate({ conversion: 'Webhook' })]), false)
  t.same(
    refused.outcomes.map((o) => o.status),
    ['refused', 'refused'],
  )
  t.equal(refused.patch, '', 'no patch for what was refused')
  t.equal(await readFile(file, 'utf8'), MULTI, 'refused: the file is untouched')
  t.match(formatFixes(refused.outcomes, false), /not fixed: .*Widget team-a\/a \(example.com\/v1\): .*webhook/)

  const fixed = await applyFixes(planFixes(blocking, [gate()]), false)
  t.same(
    fixed.outcomes.map((o) => [o.status, o.line]),
    [
      ['fixed', 2],
      ['fixed', 22],
    ],
  )
  const after = await readFile(file, 'utf8')
  t.match(after, "# The app's widgets.\napiVersion: example.com/v2   # old version, on purpose", 'comments kept')
  t.equal(blockingResources(readManifests([dir]).resources, [gate()]).length, 0, 'nothing blocks afterwards')
})
