import type { Command } from 'commander'

interface WebhookConfigOptions {
  ca: string
  host: string
  port: string
  out: string
  migratingAnnotation?: string
  migratorUsers?: string
  migratorGroups?: string
  builtinMigratorUsers?: string
}

export function registerWebhookConfig(program: Command): void {
  program
    .command('webhook-config')
    .description('write the url variant of the ValidatingWebhookConfiguration for a webhook running on this machine')
    .option('--ca <file>', 'CA that signed the serving certificate', 'certs/ca.crt')
    .option('--host <host>', 'where the webhook listens', '127.0.0.1')
    .option('--port <port>', 'webhook port', '9443')
    .option('--out <file>', 'output file', 'webhook-config/local/validating-webhook.yaml')
    .option('--migrating-annotation <key>', 'annotation key that freezes a CRD')
    .option(
      '--migrator-users <a,b>',
      'usernames the API server does not send to the webhook (those of `serve --migrator-users`); default system:serviceaccount:crd-migrator:crd-migrator',
    )
    .option('--migrator-groups <a,b>', 'groups the API server does not send to the webhook (those of `serve --migrator-groups`)')
    .option(
      '--builtin-migrator-users <a,b>',
      "kube-controller-manager's usernames, whose StorageMigrating condition writes are not sent (those of `serve --builtin-migrator-users`)",
    )
    .action(async (opts: WebhookConfigOptions) => {
      const list = (v: string | undefined) =>
        v === undefined
          ? undefined
          : v
              .split(',')
              .map((s) => s.trim())
              .filter(Boolean)
      const migratorUsers = list(opts.migratorUsers)
      const migratorGroups = list(opts.migratorGroups)
      const builtinMigratorUsers = list(opts.builtinMigratorUsers)
      const { writeLocalWebhookConfiguration } = await import('../../webhook/configuration.js')
      await writeLocalWebhookConfiguration({
        caCertFile: opts.ca,
        host: opts.host,
        port: Number(opts.port),
        outFile: opts.out,
        annotationKey: opts.migratingAnnotation,
        migratorUsers,
        migratorGroups,
        builtinMigratorUsers,
      })
      process.stdout.write(`wrote ${opts.out}; install it with: kubectl apply -f ${opts.out}\n`)
    })
}
