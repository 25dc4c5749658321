import type { Icon, ICredentialType, INodeProperties } from 'n8n-workflow';

// The tenant's handler secret: ordo signs every handler call with it
// (X-Ordo-Signature: sha256=<hex HMAC-SHA256 of the body>), and the Ordo
// Trigger node refuses a call whose signature does not match.
export class OrdoHandlerApi implements ICredentialType {
	name = 'ordoHandlerApi';

	displayName = 'Ordo Handler API';

	icon: Icon = { light: 'file:../icons/ordo.svg', dark: 'file:../icons/ordo.dark.svg' };

	documentationUrl =
		'https://github.com/ordo-dev/ordo/tree/main/web/n8n/n8n-nodes-ordo#credentials';

	properties: INodeProperties[] = [
		{
			displayName: 'Handler Secret',
			name: 'secret',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			description:
				"The tenant's handler secret (ordo tenant create and ordo dev print it); it signs ordo's calls to the Ordo Trigger",
			required: true,
		},
	];
}
