//! `kubebyon`: the platform's command line (docs/cli.md).
// A command line prints its results.
#![allow(clippy::print_stdout)]

/// A message on standard error. What the platform sent may hold a
/// terminal's escape sequences (a name another user chose, a host name a
/// joining machine reported): every control character but the line break
/// is written as a space.
macro_rules! note {
    ($($arg:tt)*) => {
        eprintln!("{}", crate::error::printable(&format!($($arg)*)))
    };
}

/// [`note!`] on standard output.
macro_rules! say {
    ($($arg:tt)*) => {
        println!("{}", crate::error::printable(&format!($($arg)*)))
    };
}

mod admin;
mod billing;
mod client;
mod clusters;
mod config;
mod error;
mod hostnames;
mod join;
mod kubeconfig;
mod login;
mod model;
mod nodes;
mod org;
mod output;

use clap::{CommandFactory, Parser, Subcommand};

use crate::{
    client::Client,
    config::{Config, Context},
    error::{CliError, Exit},
    output::Format,
};

#[derive(Debug, Parser)]
#[command(
    name = "kubebyon",
    version,
    about = "Clusters on your own machines, from a terminal"
)]
struct Cli {
    /// The context to use (`kubebyon context list`); the current one by default.
    #[arg(long, global = true, env = "KUBEBYON_CONTEXT")]
    context: Option<String>,
    /// The platform's address, instead of the context's.
    #[arg(long, global = true, env = "KUBEBYON_URL")]
    url: Option<String>,
    /// An API key, instead of the context's (for CI).
    #[arg(long, global = true, env = "KUBEBYON_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// The organisation to act in (its id), instead of the context's.
    #[arg(long, global = true, env = "KUBEBYON_ORGANIZATION")]
    org: Option<String>,
    /// How results are printed.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Format::Table)]
    output: Format,
    /// Name each request and its answer on standard error (never a key or a token).
    #[arg(long, short = 'v', global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Sign in from this terminal: approve the code it shows in the console.
    Login(login::LoginArgs),
    /// Forget the context's key, revoking it first.
    Logout,
    /// Who the key acts as.
    Whoami,
    /// The platforms signed in to.
    #[command(subcommand)]
    Context(login::ContextCommand),
    /// Clusters: list, get, create, update, delete, retry.
    #[command(subcommand, visible_alias = "cluster")]
    Clusters(clusters::ClustersCommand),
    /// A cluster's nodes: list, timeline, remove.
    #[command(subcommand, visible_alias = "node")]
    Nodes(nodes::NodesCommand),
    /// A cluster's join tokens: create (prints the join command), list, revoke.
    #[command(subcommand, visible_alias = "token")]
    Tokens(nodes::TokensCommand),
    /// Follow machines joining a cluster, step by step.
    #[command(subcommand)]
    Join(join::JoinCommand),
    /// A cluster's hostnames: list, add, verify, remove.
    #[command(subcommand, visible_alias = "hostname")]
    Hostnames(hostnames::HostnamesCommand),
    /// The organisation's plan and usage; the plans.
    #[command(subcommand)]
    Plan(billing::PlanCommand),
    /// Orders: list, create (prints where to pay), cancel.
    #[command(subcommand, visible_alias = "order")]
    Orders(billing::OrdersCommand),
    /// Organisations: list, switch, create, members, invitations, roles.
    #[command(subcommand)]
    Org(org::OrgCommand),
    /// The back office: users and the job queue (administrators).
    #[command(subcommand)]
    Admin(admin::AdminCommand),
    /// Write a kubeconfig whose credential renews itself through `kubebyon credential`.
    Kubeconfig(kubeconfig::KubeconfigArgs),
    /// kubectl's `exec` credential plugin: prints a short-lived token for a cluster.
    Credential(kubeconfig::CredentialArgs),
    /// Shell completions for bash, zsh or fish.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// The options every command shares, resolved against the configuration.
pub struct Session {
    pub config: Config,
    /// The context's name, when one is used.
    pub context_name: Option<String>,
    pub context: Context,
    pub output: Format,
    pub verbose: bool,
}

impl Session {
    fn resolve(cli: &Cli) -> Result<Self, CliError> {
        let config = Config::load()?;
        let context_name = cli
            .context
            .clone()
            .or_else(|| config.current_context.clone());
        let mut context = match &context_name {
            Some(name) => match config.contexts.get(name) {
                Some(context) => context.clone(),
                None if cli.url.is_some() => Context::default(),
                None => {
                    return Err(CliError::new(
                        Exit::Usage,
                        format!("no context named {name} (`kubebyon context list`)"),
                    ));
                }
            },
            None => Context::default(),
        };
        if let Some(url) = &cli.url {
            context.url = url.clone();
        }
        if let Some(key) = &cli.api_key {
            context.api_key = Some(key.clone());
        }
        if let Some(org) = &cli.org {
            context.organization = Some(org.clone());
        }
        Ok(Self {
            config,
            context_name,
            context,
            output: cli.output,
            verbose: cli.verbose,
        })
    }

    /// The client of the context, which must name a platform.
    pub fn client(&self) -> Result<Client, CliError> {
        if self.context.url.is_empty() {
            return Err(CliError::new(
                Exit::Usage,
                "no platform: run `kubebyon login --url https://…`, or give --url (KUBEBYON_URL)",
            ));
        }
        Client::new(
            &self.context.url,
            self.context.api_key.clone(),
            self.context.organization.clone(),
            self.verbose,
        )
    }

    /// The client, with a key.
    pub fn signed_in(&self) -> Result<Client, CliError> {
        let client = self.client()?;
        client.require_key()?;
        Ok(client)
    }
}

async fn run(cli: Cli) -> Result<(), CliError> {
    if let Command::Completions { shell } = cli.command {
        let mut command = Cli::command();
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut command, "kubebyon", &mut out);
        return output::write_stdout(&String::from_utf8_lossy(&out));
    }
    let session = Session::resolve(&cli)?;
    match cli.command {
        Command::Login(args) => login::login(session, args).await,
        Command::Logout => login::logout(session).await,
        Command::Whoami => login::whoami(&session).await,
        Command::Context(command) => login::context(session, command),
        Command::Clusters(command) => clusters::run(&session, command).await,
        Command::Nodes(command) => nodes::run(&session, command).await,
        Command::Tokens(command) => nodes::tokens(&session, command).await,
        Command::Join(command) => join::run(&session, command).await,
        Command::Hostnames(command) => hostnames::run(&session, command).await,
        Command::Plan(command) => billing::plan(&session, command).await,
        Command::Orders(command) => billing::orders(&session, command).await,
        Command::Org(command) => org::run(session, command).await,
        Command::Admin(command) => admin::run(&session, command).await,
        Command::Kubeconfig(args) => kubeconfig::kubeconfig(&session, args).await,
        Command::Credential(args) => kubeconfig::credential(&session, args).await,
        Command::Completions { .. } => unreachable!("answered above"),
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime starts");
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", error::one_line(&error.message));
            std::process::ExitCode::from(error.exit as u8)
        }
    }
}
