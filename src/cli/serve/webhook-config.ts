import type { Command } from 'commander'
import type { WebhookConfigFlags } from '../../webhook/local-configuration.js'

export function registerWebhookConfig(program: Command): void {
  program
    .command('webhook-config')
    .description(
      'print the url variant of the ValidatingWebhookConfiguration, for a webhook running outside the cluster (e.g. on this machine); apply it with kubectl apply -f -',
    )
    .option('--ca <file>', 'PEM file of the CA that signed the webhook serving certificate (this or --ca-bundle is required)')
    .option('--ca-bundle <base64>', 'the caBundle itself: base64 of the PEM CA certificate, instead of --ca')
    .option('--host <host>', 'where the webhook listens, as the API server reaches it', '127.0.0.1')
    .option('--port <port>', 'webhook port (1-65535)', '9443')
    .option('--out <file>', 'write the YAML to this file instead of stdout (- is stdout)', '-')
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
    .action(async (opts: WebhookConfigFlags) => {
      const { webhookConfigInputs, readCaPem, localWebhookConfigurationYaml, writeOutFile } =
        await import('../../webhook/local-configuration.js')
      const inputs = webhookConfigInputs(opts)
      const yaml = localWebhookConfigurationYaml(inputs, readCaPem(inputs.ca))
      if (inputs.outFile === undefined) {
        process.stdout.write(yaml)
        return
      }
      await writeOutFile(inputs.outFile, yaml)
      process.stderr.write(`wrote ${inputs.outFile}; install it with: kubectl apply -f ${inputs.outFile}\n`)
    })
}
