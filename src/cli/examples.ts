/** Each command's `Examples:` at the end of its help, as kubectl's: the everyday uses, each with what it does. */
export const EXAMPLES: Readonly<Record<string, readonly (readonly [comment: string, command: string])[]>> = {
  migrate: [
    ['Migrate one CRD now (freeze, rewrite, narrow storedVersions, clean managedFields, unfreeze)', 'migrate widgets.example.com'],
    ['Every CRD a label selects, 4 at a time', 'migrate -l app.kubernetes.io/part-of=my-operator'],
    ['Say what each phase would do, and write nothing', 'migrate widgets.example.com --dry-run'],
    ['Let the API server convert and admit every object, storing nothing', 'migrate widgets.example.com --dry-run=server'],
    ['Rewrite every Secret after an encryption key rotation', 'migrate --resource secrets'],
  ],
  status: [
    ['Every managed CRD: storage version, storedVersions, freeze, phase, progress', 'status'],
    ['One CRD, managed or not, with its state and ETA', 'status widgets.example.com -o wide'],
    ['Follow an operator upgrade until it ends', 'status --summary -w'],
  ],
  check: [
    ['Is it safe to drop v1 from a CRD? Exit 3 when not', 'check widgets.example.com --drop v1'],
    ["The CRDs and custom resources of a chart's crds/ about to be applied", 'check --manifests ./charts/my-operator/crds'],
    [
      'Move custom resources in a GitOps folder off the dropped version, as a patch',
      'check --manifests ./deploy --drop v1 --fix --dry-run > fix.patch',
    ],
  ],
  plan: [
    ['Which CRDs need work, how many objects, how long (a rough constant)', 'plan'],
    ['An estimate measured on this cluster with dry-run writes (nothing stored)', 'plan --measure'],
  ],
  serve: [
    ['The webhook and the migrator, as the chart runs them', 'serve --config /etc/crd-migrator/config.yaml'],
    ['The webhook only, with its own certificate', 'serve --no-migrator --tls-cert tls.crt --tls-key tls.key'],
  ],
  'webhook-config': [
    [
      'The ValidatingWebhookConfiguration for a webhook on this machine, applied',
      'webhook-config --host 10.0.0.5 --ca ca.crt | kubectl apply -f -',
    ],
  ],
  version: [['The CLI and API server versions', 'version']],
  completion: [['Tab completion in this bash shell (zsh and fish alike)', 'completion bash > ~/.crd-migrator-completion.bash']],
}

/** The `Examples:` block of `command`, with `program` (crd-migrator, or kubectl crd-migrator) in front of each; empty without examples. */
export function examplesText(program: string, command: string): string {
  const rows = EXAMPLES[command]
  if (!rows?.length) return ''
  return `\nExamples:\n${rows.map(([comment, line]) => `  # ${comment}\n  ${program} ${line}`).join('\n\n')}\n`
}
