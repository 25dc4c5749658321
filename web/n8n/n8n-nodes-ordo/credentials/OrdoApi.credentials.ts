import type {
	IAuthenticateGeneric,
	Icon,
	ICredentialTestRequest,
	ICredentialType,
	INodeProperties,
} from 'n8n-workflow';

// The tenant's ordo API: its base URL and one of its API keys (`ordo tenant
// create` prints the first; `ordo apikey create` makes more).
export class OrdoApi implements ICredentialType {
	name = 'ordoApi';

	displayName = 'Ordo API';

	icon: Icon = { light: 'file:../icons/ordo.svg', dark: 'file:../icons/ordo.dark.svg' };

	documentationUrl =
		'https://github.com/ordo-dev/ordo/tree/main/web/n8n/n8n-nodes-ordo#credentials';

	properties: INodeProperties[] = [
		{
			displayName: 'Base URL',
			name: 'baseUrl',
			type: 'string',
			default: 'http://localhost:8080',
			placeholder: 'https://ordo.example.com',
			description: "Ordo's URL as n8n reaches it, without /v1",
			required: true,
		},
		{
			displayName: 'API Key',
			name: 'apiKey',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			description: "The tenant's API key (ordo tenant create prints it)",
			required: true,
		},
	];

	authenticate: IAuthenticateGeneric = {
		type: 'generic',
		properties: {
			headers: {
				Authorization: '=Bearer {{$credentials.apiKey}}',
			},
		},
	};

	// An authenticated read: 200 with a key of this ordo, 401 without.
	test: ICredentialTestRequest = {
		request: {
			baseURL: '={{$credentials.baseUrl.replace(/\\/+$/, "")}}',
			url: '/v1/dead-letters',
			method: 'GET',
		},
	};
}
