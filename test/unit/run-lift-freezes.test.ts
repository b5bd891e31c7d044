import t from 'tap'
import { ownedByRelease } from '../../src/cli/lift-freezes/run-lift-freezes.js'

// Which freezes the chart's pre-delete hook lifts: those of a pod of its own Deployment, no other.
const rows: Array<[owner: string | undefined, prefix: string, lifted: boolean, why: string]> = [
  ['crd-migrator-7d9f8c6b5-x2kqz', 'crd-migrator-', true, "a pod of the release's Deployment"],
  ['crd-migrator-5f4d-abcde', 'crd-migrator-', true, 'a short ReplicaSet hash'],
  ['crd-migrator-foo-7d9f8c6b5-x2kqz', 'crd-migrator-', false, "a pod of another release whose name starts like this one's"],
  ['crd-migrator-7d9f8c6b5', 'crd-migrator-', false, 'no pod suffix'],
  ['crd-migrator-7d9f8c6b5-x2kq', 'crd-migrator-', false, 'a suffix of 4 characters'],
  ['cli:alice@laptop', 'crd-migrator-', false, 'the CLI of a person'],
  ['other-crd-migrator-7d9f8c6b5-x2kqz', 'crd-migrator-', false, 'the prefix elsewhere in the name'],
  ['crd-migrator-7D9F8C6B5-X2KQZ', 'crd-migrator-', false, 'not a pod name (upper case)'],
  [undefined, 'crd-migrator-', false, 'no owner: a foreign freeze'],
  ['crd-migrator-7d9f8c6b5-x2kqz', '', false, 'no prefix given: nothing is ours'],
]
for (const [owner, prefix, lifted, why] of rows) t.equal(ownedByRelease(owner, prefix), lifted, `${String(owner)}: ${why}`)
