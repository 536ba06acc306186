//! The desk's one taxonomy: the categories a ticket may be classified
//! under, from config `categories` or else the business rules (TINY.md's
//! line naming the categories, `分类口径：退款 / 物流 / 账户 / 技术`). A
//! category may carry aliases in parentheses — `退款 (refund, returns)` —
//! so a desk with tickets in two languages keeps one set of names: an alias
//! is accepted and stored as the category's name.
//!
//! Queues are config `queues`. With no categories (or no queues) declared,
//! any value is accepted, as in TinyCode.

/// One category and the other words that mean it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Category {
    pub name: String,
    pub aliases: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taxonomy {
    pub categories: Vec<Category>,
    pub queues: Vec<String>,
}

/// Longest category name or alias read from the rules (a longer piece of
/// text is prose, not a name).
const MAX_NAME_CHARS: usize = 24;

impl Taxonomy {
    /// Config `categories` when given (each may carry aliases the same way),
    /// else the rules' categories line.
    pub fn new(configured: &[String], rules: &str, queues: &[String]) -> Self {
        let categories = if configured.is_empty() {
            categories_in(rules)
        } else {
            configured.iter().filter_map(|c| category(c)).collect()
        };
        Self {
            categories,
            queues: queues.to_vec(),
        }
    }

    /// The category `value` names (its name or an alias, any case), or an
    /// error listing the allowed names.
    pub fn category(&self, value: &str) -> Result<String, String> {
        let value = value.trim();
        if self.categories.is_empty() {
            return Ok(value.to_string());
        }
        let wanted = value.to_lowercase();
        self.categories
            .iter()
            .find(|c| {
                c.name.to_lowercase() == wanted
                    || c.aliases.iter().any(|a| a.to_lowercase() == wanted)
            })
            .map(|c| c.name.clone())
            .ok_or_else(|| {
                format!(
                    "there is no category {value:?} on this desk; the categories are {}",
                    self.category_names().join(", ")
                )
            })
    }

    /// The queue `value` names, or an error listing the queues.
    pub fn queue(&self, value: &str) -> Result<String, String> {
        let value = value.trim();
        if self.queues.is_empty() || self.queues.iter().any(|q| q == value) {
            return Ok(value.to_string());
        }
        Err(format!(
            "there is no queue {value:?} on this desk; the queues are {}",
            self.queues.join(", ")
        ))
    }

    pub fn category_names(&self) -> Vec<&str> {
        self.categories.iter().map(|c| c.name.as_str()).collect()
    }
}

/// The categories named by the business rules: the first line mentioning
/// 分类 or "categor" with at least two `/`-separated names after a colon
/// (an em-dash `——` ends the list).
pub fn categories_in(rules: &str) -> Vec<Category> {
    rules
        .lines()
        .filter(|l| l.contains("分类") || l.to_lowercase().contains("categor"))
        .find_map(|l| {
            let after = l.split_once('：').or_else(|| l.split_once(':'))?.1;
            let list = after.split("——").next().unwrap_or(after);
            let found: Vec<Category> = list.split('/').filter_map(category).collect();
            (found.len() >= 2).then_some(found)
        })
        .unwrap_or_default()
}

/// `退款 (refund, returns)` → 退款 with two aliases; `None` for prose.
fn category(text: &str) -> Option<Category> {
    let text = text.trim().trim_end_matches(['。', '.', ';', '；']);
    let (name, aliases) = match text.split_once(['(', '（']) {
        Some((name, rest)) => {
            let inner = rest.trim_end_matches([')', '）']);
            let aliases = inner
                .split([',', '，', '、'])
                .map(|a| a.trim().to_string())
                .filter(|a| !a.is_empty() && a.chars().count() <= MAX_NAME_CHARS)
                .collect();
            (name.trim(), aliases)
        }
        None => (text, Vec::new()),
    };
    (!name.is_empty() && name.chars().count() <= MAX_NAME_CHARS).then(|| Category {
        name: name.to_string(),
        aliases,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: &str = "- 所有工单必须在首次响应 SLA 内完成分流。\n- 分类口径：退款 (refund, returns) / 物流（logistics）/ 账户 / 技术 —— 一条工单只归一个主分类。\n";

    #[test]
    fn the_rules_name_the_categories_and_their_aliases() {
        let t = Taxonomy::new(&[], RULES, &["售后组".into()]);
        assert_eq!(t.category_names(), ["退款", "物流", "账户", "技术"]);
        assert_eq!(t.categories[0].aliases, ["refund", "returns"]);
        assert_eq!(t.categories[1].aliases, ["logistics"]);
        assert_eq!(t.category("Refund"), Ok("退款".into()));
        assert_eq!(t.category("物流"), Ok("物流".into()));
        let err = t.category("technical").unwrap_err();
        assert!(err.contains("退款, 物流, 账户, 技术"), "{err}");
        assert_eq!(t.queue("售后组"), Ok("售后组".into()));
        assert!(t.queue("billing").unwrap_err().contains("售后组"));
    }

    #[test]
    fn config_wins_and_an_empty_taxonomy_accepts_anything() {
        let t = Taxonomy::new(&["billing (invoice)".into(), "bugs".into()], RULES, &[]);
        assert_eq!(t.category_names(), ["billing", "bugs"]);
        assert_eq!(t.category("invoice"), Ok("billing".into()));
        let open = Taxonomy::new(&[], "no rules here", &[]);
        assert_eq!(open.category("anything"), Ok("anything".into()));
        assert_eq!(open.queue("any"), Ok("any".into()));
    }

    #[test]
    fn english_rules_work_too() {
        let t = Taxonomy::new(&[], "Categories: billing / shipping / account", &[]);
        assert_eq!(t.category_names(), ["billing", "shipping", "account"]);
    }
}
